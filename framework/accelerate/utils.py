"""What Accelerate scripts import from ``accelerate.utils``: the configuration objects the ``Accelerator`` takes,
``DistributedType`` and ``set_seed``. Change ``from accelerate.utils import X`` to
``from framework.accelerate.utils import X``."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from framework.seed import seed_everything


class DistributedType(str, enum.Enum):
    """How the processes of a run share the work (``accelerator.distributed_type``)."""

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    FSDP = "FSDP"


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed Python, NumPy and torch; ``device_specific`` adds the process index, so each rank draws differently.

    Example::

        set_seed(42)
    """
    if device_specific:
        from framework.utilities.rank_zero import rank_zero_only

        seed += getattr(rank_zero_only, "rank", 0)
    seed_everything(seed, verbose=False)
    if deterministic:
        import torch

        torch.use_deterministic_algorithms(True)


@dataclass
class ProjectConfiguration:
    """Where a project's states and logs go: ``project_dir``, ``logging_dir`` (``project_dir`` when None), and
    ``automatic_checkpoint_naming`` (``save_state()`` writes ``project_dir/checkpoints/checkpoint_<iteration>``,
    keeping the last ``total_limit``)."""

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False

    def __post_init__(self) -> None:
        self.set_directories(self.project_dir)

    def set_directories(self, project_dir: str | None = None) -> None:
        """Set ``project_dir``, and ``logging_dir`` to it unless set already."""
        self.project_dir = project_dir
        if self.logging_dir is None:
            self.logging_dir = project_dir


@dataclass
class GradientAccumulationPlugin:
    """Accumulation settings: ``num_steps`` batches per optimizer step; ``sync_with_dataloader``: a pass's last
    batch always steps; ``sync_each_batch``: all-reduce every batch anyway (less memory); ``adjust_scheduler``."""

    num_steps: int | None = None
    adjust_scheduler: bool = True
    sync_with_dataloader: bool = True
    sync_each_batch: bool = False


@dataclass
class DataLoaderConfiguration:
    """How prepared dataloaders share batches: ``even_batches`` (the last round completed from the first samples
    so every rank runs as many batches), ``split_batches`` (not supported: each rank takes whole batches),
    ``non_blocking`` (copies to the GPU that do not wait). Seeding and position are always handled:
    ``use_seedable_sampler``, ``use_stateful_dataloader`` and ``data_seed`` are accepted for Accelerate's sake."""

    split_batches: bool = False
    dispatch_batches: bool | None = None
    even_batches: bool = True
    use_seedable_sampler: bool = False
    data_seed: int | None = None
    non_blocking: bool = False
    use_stateful_dataloader: bool = False


class KwargsHandler:
    """The keyword-argument holders given as ``Accelerator(kwargs_handlers=[...])``."""

    def to_kwargs(self) -> dict[str, Any]:
        """The fields that differ from their defaults."""
        defaults = asdict(type(self)())  # type: ignore[call-overload]
        return {key: value for key, value in asdict(self).items() if defaults[key] != value}  # type: ignore[call-overload]


@dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Options for ``torch.nn.parallel.DistributedDataParallel``."""

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False


@dataclass
class GradScalerKwargs(KwargsHandler):
    """Options for the fp16 ``torch.amp.GradScaler``."""

    init_scale: float = 65536.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    enabled: bool = True


@dataclass
class InitProcessGroupKwargs(KwargsHandler):
    """Options for the process group: ``backend`` (None: gloo on CPU, nccl on CUDA) and ``timeout``."""

    backend: str | None = None
    init_method: str | None = None
    timeout: timedelta | None = None


@dataclass
class AutocastKwargs(KwargsHandler):
    """Options for autocast: ``enabled=False`` runs the forward passes in fp32."""

    enabled: bool = True
    cache_enabled: bool | None = None


@dataclass
class FullyShardedDataParallelPlugin:
    """FSDP settings, as ``fsdp_config`` in Accelerate's config file; the framework runs them on FSDP2.

    ``sharding_strategy`` (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD and HYBRID_SHARD_ZERO2: sharded
    within a node, replicated across nodes) or, for ``fsdp_version=2``,
    ``reshard_after_forward``; ``cpu_offload``; ``auto_wrap_policy`` (TRANSFORMER_BASED_WRAP with
    ``transformer_cls_names_to_wrap``, SIZE_BASED_WRAP with ``min_num_params``, NO_WRAP);
    ``state_dict_type`` (SHARDED_STATE_DICT or FULL_STATE_DICT); ``activation_checkpointing``.
    """

    fsdp_version: int = 2
    sharding_strategy: str = "FULL_SHARD"
    reshard_after_forward: bool | None = None
    cpu_offload: bool = False
    auto_wrap_policy: str | None = None
    transformer_cls_names_to_wrap: list[str] | None = None
    min_num_params: int = 0
    state_dict_type: str = "SHARDED_STATE_DICT"
    activation_checkpointing: bool = False

    def options(self) -> dict[str, Any]:
        """These settings as ``FSDPStrategy`` arguments."""
        from framework.accelerate.settings import fsdp_options

        sharding = self.sharding_strategy
        if self.fsdp_version == 2 and self.reshard_after_forward is not None:
            sharding = "FULL_SHARD" if self.reshard_after_forward else "SHARD_GRAD_OP"
        return fsdp_options(sharding, bool(self.cpu_offload), self.auto_wrap_policy,
                            self.transformer_cls_names_to_wrap, self.min_num_params, self.state_dict_type,
                            self.activation_checkpointing)
