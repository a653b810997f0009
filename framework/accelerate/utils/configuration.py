"""The configuration objects the ``Accelerator`` takes, with Accelerate's fields and defaults: where a project
writes (``ProjectConfiguration``), how loaders share batches (``DataLoaderConfiguration``), accumulation
(``GradientAccumulationPlugin``), FSDP (``FullyShardedDataParallelPlugin``) and compilation
(``TorchDynamoPlugin``)."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from framework.errors import MisconfigurationError, describe


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
    ``non_blocking`` (copies to the GPU that do not wait), ``use_seedable_sampler`` (a shuffled loader's pass
    ``e`` is seeded with ``data_seed``, else torch's initial seed, plus ``e``, which ``set_epoch`` chooses, as
    Accelerate's seedable sampler). The position in a pass is always saved: ``use_stateful_dataloader`` is
    accepted for Accelerate's sake."""

    split_batches: bool = False
    dispatch_batches: bool | None = None
    even_batches: bool = True
    use_seedable_sampler: bool = False
    data_seed: int | None = None
    non_blocking: bool = False
    use_stateful_dataloader: bool = False


@dataclass
class FullyShardedDataParallelPlugin:
    """FSDP settings, the fields of ``fsdp_config`` in Accelerate's config file; the framework runs them on FSDP2.

    A field left None takes the launcher's ``FSDP_*`` setting, else Accelerate's default.
    ``sharding_strategy`` (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD and HYBRID_SHARD_ZERO2: sharded
    within a node, replicated across nodes) or, for ``fsdp_version=2``, ``reshard_after_forward``;
    ``cpu_offload``; ``auto_wrap_policy`` (``"transformer_based_wrap"`` with ``transformer_cls_names_to_wrap``,
    ``"size_based_wrap"`` with ``min_num_params``, ``"no_wrap"``, or a callable taking a module);
    ``state_dict_type`` (SHARDED_STATE_DICT or FULL_STATE_DICT), or ``state_dict_config`` as a
    ``torch.distributed.fsdp`` ``FullStateDictConfig``/``ShardedStateDictConfig`` (``optim_state_dict_config``
    follows it); ``activation_checkpointing``. FSDP1's tuning knobs (``backward_prefetch``,
    ``forward_prefetch``, ``limit_all_gathers``, ``use_orig_params``, ``sync_module_states``,
    ``cpu_ram_efficient_loading``) have no FSDP2 counterpart and are accepted as they are; ``ignored_modules``,
    ``param_init_fn``, ``mixed_precision_policy`` (use ``Accelerator(mixed_precision=...)``) and
    ``activation_checkpointing_offload`` are refused when the plugin is used.

    Example::

        plugin = FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
                                                transformer_cls_names_to_wrap=["Block"])
        accelerator = Accelerator(fsdp_plugin=plugin)
    """

    fsdp_version: int | None = None
    sharding_strategy: Any = None
    reshard_after_forward: bool | str | None = None
    backward_prefetch: Any = None
    mixed_precision_policy: Any = None
    auto_wrap_policy: Callable[..., Any] | str | None = None
    cpu_offload: Any = None
    ignored_modules: Iterable[Any] | str | None = None
    state_dict_type: Any = None
    state_dict_config: Any = None
    optim_state_dict_config: Any = None
    limit_all_gathers: bool = True
    use_orig_params: bool | None = None
    param_init_fn: Callable[..., Any] | None = None
    sync_module_states: bool | None = None
    forward_prefetch: bool | None = None
    activation_checkpointing: bool | None = None
    activation_checkpointing_offload: bool | None = None
    cpu_ram_efficient_loading: bool | None = None
    transformer_cls_names_to_wrap: list[str] | None = None
    min_num_params: int | None = None

    def set_state_dict_type(self, state_dict_type: Any = None) -> None:
        """Save whole (``"FULL_STATE_DICT"``) or sharded (``"SHARDED_STATE_DICT"``) from now on."""
        self.state_dict_type = state_dict_type
        self.state_dict_config = None

    def set_auto_wrap_policy(self, model: Any) -> None:
        """Check that the layer classes to wrap exist in ``model`` (a typo is said now, as Accelerate does)."""
        names = self.transformer_cls_names_to_wrap
        if isinstance(names, str):
            names = names.split(",")
        present = {type(module).__name__ for module in model.modules()}
        missing = sorted({name.strip() for name in names or []} - present)
        if missing:
            raise MisconfigurationError(f"FullyShardedDataParallelPlugin(transformer_cls_names_to_wrap=...) names "
                                        f"{missing}, which {type(model).__name__} does not contain.")

    def set_mixed_precision(self, mixed_precision: Any, buffer_autocast: bool = False, override: bool = False
                            ) -> None:
        """Accepted for Accelerate's sake: FSDP's dtypes follow ``Accelerator(mixed_precision=...)``."""

    def validate_mixed_precision_policy(self) -> None:
        """Refuse a mixed-precision policy of the plugin's own (the Accelerator's ``mixed_precision`` decides)."""
        if self.mixed_precision_policy is not None:
            raise MisconfigurationError(
                f"FullyShardedDataParallelPlugin(mixed_precision_policy={describe(self.mixed_precision_policy)}) is "
                "not supported: FSDP's dtypes follow Accelerator(mixed_precision='bf16' | 'fp16')."
            )


@dataclass
class TorchDynamoPlugin:
    """``torch.compile`` settings (``Accelerator(dynamo_plugin=...)``): ``backend`` (a ``DynamoBackend`` or its
    name), ``mode``, ``fullgraph``, ``dynamic``, ``options``; ``disable``; ``use_regional_compilation``."""

    backend: Any = None
    mode: str | None = None
    fullgraph: bool | None = None
    dynamic: bool | None = None
    options: Any = None
    disable: bool = False
    use_regional_compilation: bool | None = None
