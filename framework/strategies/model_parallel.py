"""Tensor parallelism with FSDP2 on a 2-D device mesh: the Module splits its own layers, the strategy runs them."""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from framework.checks import is_int
from framework.errors import MisconfigurationError, describe
from framework.strategies.dtensors import quiet_redistribution_notes
from framework.strategies.fsdp import ROOT_ATTRIBUTE, FSDPStrategy
from framework.strategies.parallel import StepRouter

MESH_DIMENSIONS = ("data_parallel", "tensor_parallel")


class ModelParallelStrategy(FSDPStrategy):
    """Data parallel x tensor parallel, on a 2-D ``DeviceMesh`` with dimensions ``"data_parallel"`` and
    ``"tensor_parallel"`` (PyTorch's DTensor, ``parallelize_module`` and ``fully_shard``; torchtitan's recipe).

    The Module applies the parallelism in ``configure_model``, reading ``self.device_mesh``:
    ``parallelize_module`` over ``self.device_mesh["tensor_parallel"]`` (colwise/rowwise plans,
    sequence parallel), then ``fully_shard`` over ``self.device_mesh["data_parallel"]``. The
    strategy does the rest, as for ``FSDPStrategy``: one outer ``fully_shard`` unit for the
    parameters the Module left unsharded, optimizers, precision, gradient clipping over the
    DTensors, evaluation, logging and checkpoints. Batches are split over the data-parallel
    ranks only: the ranks of one tensor-parallel group see the same batch. With ``precision="bf16-mixed"``
    parameters are gathered in bfloat16 and gradients reduced in fp32 (FSDP2's ``MixedPrecisionPolicy``) in
    the units the Module made without a policy of its own.

    :param data_parallel_size: the mesh's first dimension, a positive int; ``"auto"`` (default): the number of
        nodes when both sizes are ``"auto"`` (as Lightning), else the number of ranks over the other size.
    :param tensor_parallel_size: the mesh's second dimension; ``"auto"`` (default): the ranks of a node when
        both are ``"auto"``, else the number of ranks over ``data_parallel_size``. The product must be the
        number of ranks.
    :param save_distributed_checkpoint: True (default) writes a directory each rank writes its parts to
        (``torch.distributed.checkpoint``; it loads into any mesh shape and any number of ranks, ``framework
        consolidate`` makes one file of it); False gathers one whole file on rank 0.
    :param process_group_backend: ``None`` (default): ``"nccl"`` on CUDA, ``"gloo"`` elsewhere; or another backend.
    :param timeout: how long a collective may wait: a ``datetime.timedelta`` or seconds; ``None`` (default): 30 min.
    :param activation_checkpointing_policy: submodules (a set of classes, or a callable) that recompute their
        activations in backward; ``None`` (default): none.
    :param start_method: how the ranks no launcher started are started, as for DDP (default ``"auto"``).
    :param parallelize_fn: ``fn(module, device_mesh) -> module``, for the bare Runtime (Fabric's form; it may
        also come first, in place of ``data_parallel_size``): applied by ``runtime.setup(module)``. With the
        Trainer, ``configure_model`` does this. ``None`` (default): nothing is applied.
    :raises MisconfigurationError: where ``data_parallel_size`` or ``tensor_parallel_size`` is neither "auto" nor a
        positive int, or ``save_distributed_checkpoint`` is not a bool.

    Example::

        class GPT(Module):
            def configure_model(self):
                tp, dp = self.device_mesh["tensor_parallel"], self.device_mesh["data_parallel"]
                for block in self.blocks:
                    parallelize_module(block, tp, {"mlp.up": ColwiseParallel(), "mlp.down": RowwiseParallel()})
                    fully_shard(block, mesh=dp)

        Trainer(accelerator="cpu", devices=4, strategy=ModelParallelStrategy(data_parallel_size=2))
    """

    name = "model_parallel"

    def __init__(self, data_parallel_size: Any = "auto", tensor_parallel_size: Any = "auto",
                 save_distributed_checkpoint: bool = True, process_group_backend: str | None = None,
                 timeout: timedelta | float | None = None, activation_checkpointing_policy: Any = None,
                 start_method: str = "auto", parallelize_fn: Callable[[nn.Module, Any], nn.Module] | None = None,
                 ) -> None:
        if callable(data_parallel_size):  # Fabric's ModelParallelStrategy takes parallelize_fn first
            parallelize_fn, data_parallel_size = data_parallel_size, "auto"
        _check_size("data_parallel_size", data_parallel_size)
        _check_size("tensor_parallel_size", tensor_parallel_size)
        if not isinstance(save_distributed_checkpoint, bool):
            raise MisconfigurationError(f"ModelParallelStrategy(save_distributed_checkpoint="
                                        f"{describe(save_distributed_checkpoint)}): accepted True or False.")
        super().__init__(auto_wrap_policy=None, activation_checkpointing_policy=activation_checkpointing_policy,
                         state_dict_type="sharded" if save_distributed_checkpoint else "full",
                         start_method=start_method, timeout=timeout, process_group_backend=process_group_backend)
        self.data_parallel_size = data_parallel_size
        self.tensor_parallel_size = tensor_parallel_size
        self.save_distributed_checkpoint = save_distributed_checkpoint
        self.parallelize_fn = parallelize_fn
        self._device_mesh: Any = None

    def connect(self, device: torch.device, precision: Any, ranks: Any = None) -> None:
        """As every strategy; a mesh made for other ranks (this object used before, in another run) is dropped."""
        super().connect(device, precision, ranks)
        self._device_mesh = None

    @property
    def device_mesh(self) -> Any:
        """The 2-D ``DeviceMesh`` (``"data_parallel"``, ``"tensor_parallel"``); made when first asked for."""
        if self._device_mesh is None:
            from torch.distributed.device_mesh import init_device_mesh

            self.setup_environment()
            shape = mesh_shape(self.data_parallel_size, self.tensor_parallel_size, dist.get_world_size(),
                               self.ranks.local_world_size)
            self._device_mesh = init_device_mesh(self.device.type, shape, mesh_dim_names=MESH_DIMENSIONS)
            quiet_redistribution_notes()  # the scaler's and the norms' reductions run one mesh dimension at a time
        return self._device_mesh

    @property
    def mesh(self) -> Any:
        """The data-parallel dimension, which the outer ``fully_shard`` unit splits over."""
        return self.device_mesh["data_parallel"]

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        """A share of the data per data-parallel rank: the tensor-parallel ranks of a group read the same."""
        mesh = self.device_mesh["data_parallel"]
        return {"num_replicas": mesh.size(), "rank": mesh.get_local_rank()}

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Apply ``parallelize_fn`` (if given), then shard what the Module's own plan left whole."""
        if self.parallelize_fn is not None and not isinstance(module.__dict__.get(ROOT_ATTRIBUTE), StepRouter):
            module = self.parallelize_fn(module, self.device_mesh) or module
        return super().setup_module(module)

    def _before_root_shard(self, module: nn.Module) -> None:
        """Check that the Module split its layers, and give the precision's mixed precision policy to the units
        it sharded without one."""
        tensor_parallel = self.device_mesh["tensor_parallel"]
        if tensor_parallel.size() > 1 and not _any_parameter_on(module, tensor_parallel):
            raise MisconfigurationError(
                f"ModelParallelStrategy has {tensor_parallel.size()} tensor-parallel ranks, but no parameter of "
                f"{type(module).__name__} is split over them: each rank would compute the whole model. Apply "
                "torch.distributed.tensor.parallel.parallelize_module(..., self.device_mesh['tensor_parallel'], plan) "
                "in the Module's configure_model() (or pass parallelize_fn= to use the bare Runtime)."
            )
        give_policy(module, self._shard_options()["mp_policy"])

    def _shard_options(self) -> dict[str, Any]:
        options = super()._shard_options()
        if self.mixed_precision is None and getattr(self.precision, "name", "") == "bf16-mixed":
            from torch.distributed.fsdp import MixedPrecisionPolicy

            options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        return options

    def __repr__(self) -> str:
        shape = tuple(self._device_mesh.shape) if self._device_mesh is not None else (
            self.data_parallel_size, self.tensor_parallel_size)
        return f"{type(self).__name__}(device={self.device}, world_size={self.world_size}, mesh={shape})"


def mesh_shape(data_parallel_size: Any, tensor_parallel_size: Any, world_size: int,
               ranks_per_node: int) -> tuple[int, int]:
    """``(data_parallel, tensor_parallel)`` sizes, "auto" resolved; their product must be ``world_size``."""
    data, tensor = data_parallel_size, tensor_parallel_size
    if data == "auto" and tensor == "auto":
        tensor = ranks_per_node
        data = world_size // tensor
    elif data == "auto":
        data = world_size // tensor if world_size % tensor == 0 else 0
    elif tensor == "auto":
        tensor = world_size // data if world_size % data == 0 else 0
    if data * tensor != world_size:
        raise MisconfigurationError(
            f"ModelParallelStrategy(data_parallel_size={describe(data_parallel_size)}, tensor_parallel_size="
            f"{describe(tensor_parallel_size)}) does not fit the {world_size} ranks of this run: the two sizes' "
            f"product must be {world_size}."
        )
    return data, tensor


def give_policy(module: nn.Module, policy: Any) -> None:
    """Set ``policy`` on each ``fully_shard`` unit under ``module`` made with the default (no mixed precision), before
    FSDP's first forward reads it. FSDP2 has no public setter; a torch without these fields is left as it is."""
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy

    if policy == MixedPrecisionPolicy():
        return
    for unit in module.modules():
        if not isinstance(unit, FSDPModule):
            continue
        state = unit._get_fsdp_state()
        group = getattr(state, "_fsdp_param_group", None)
        if getattr(state, "_mp_policy", None) == MixedPrecisionPolicy():
            state._mp_policy = policy
            if group is not None and hasattr(group, "mp_policy"):
                group.mp_policy = policy


def _any_parameter_on(module: nn.Module, mesh: Any) -> bool:
    """Whether a parameter of ``module`` is a DTensor split over ``mesh`` (alone, or as part of a larger mesh)."""
    from torch.distributed.tensor import DTensor

    names = set(mesh.mesh_dim_names or ())
    return any(isinstance(p, DTensor) and names <= set(p.device_mesh.mesh_dim_names or ()) for p in module.parameters())


def _check_size(argument: str, value: Any) -> None:
    if value == "auto" or (is_int(value) and value > 0):
        return
    raise MisconfigurationError(f"ModelParallelStrategy({argument}={describe(value)}): accepted 'auto' or a "
                                "positive int.")
