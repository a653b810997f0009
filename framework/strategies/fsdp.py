"""ZeRO-2 and ZeRO-3 on PyTorch's FSDP2 (``fully_shard``): parameters, gradients and optimizer state split
over the ranks, with CPU offload."""

import contextlib
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.optim import Optimizer

from framework.errors import MisconfigurationError, describe
from framework.io.checkpoint_io import CheckpointIO
from framework.strategies.base import _parameters_of
from framework.strategies.dtensors import (
    clip_with_norm,
    has_meta_tensors,
    materialize,
    quiet_redistribution_notes,
    total_norm,
)
from framework.strategies.fsdp_options import (
    HYBRID,
    STATE_DICT_TYPES,
    check_device_mesh,
    check_fully_shard_options,
    check_offload,
    reshards_after_forward,
    sharding_name,
)
from framework.strategies.fsdp_policy import apply_checkpointing, units_to_shard, wrap_policy
from framework.strategies.fsdp_state import ShardedStateMethods
from framework.strategies.fsdp_units import forget_forward_passes, sharded_units, without_gradient_sync
from framework.strategies.parallel import (
    ParallelStrategy,
    StepRouter,
    broadcast_from_rank_zero,
    routed,
    start_process_group,
)

# Where a sharded module keeps the root that shards it, for the next run to reuse.
ROOT_ATTRIBUTE = "_framework_sharded_root"


class FSDPStrategy(ShardedStateMethods, ParallelStrategy):
    """Fully sharded data parallel on ``torch.distributed.fsdp.fully_shard`` (FSDP2), on CPU (gloo) and CUDA.

    ``sharding_strategy="FULL_SHARD"`` (ZeRO-3, ``strategy="zero3"``): parameters are gathered
    for each unit's forward and backward and split again after; ``"SHARD_GRAD_OP"`` (ZeRO-2,
    ``strategy="zero2"``): they stay gathered from forward to backward. Gradients and
    optimizer state are split either way. Per rank, for Ψ parameters with fp32 Adam on N ranks:
    ZeRO-3 16Ψ/N; ZeRO-2 4Ψ + 12Ψ/N. ``"HYBRID_SHARD"`` (HSDP; ``"_HYBRID_SHARD_ZERO2"`` keeps
    parameters gathered from forward to backward): the ranks form a 2-D mesh ``device_mesh=(replicas,
    shard_size)``; the state is split over the ``shard_size`` ranks of each group, and each group holds
    a whole replica (gradients are averaged across the groups). By default a group is one node
    (``(num_nodes, devices)``), so the all-gathers stay inside a node.

    Layers created on the meta device (in ``configure_model``, or under ``trainer.init_module(
    empty_init=True)``) are allocated directly sharded and initialised by their
    ``reset_parameters()``, so a model larger than one rank's memory can be built.

    :param auto_wrap_policy: which submodules are gathered as a unit of their own. ``"auto"`` (default): each
        child of a ``ModuleList``/``Sequential`` holding parameters, and any other submodule of at least 1M
        parameters; or a set of classes (``{Block}``), a callable ``module -> bool`` (or FSDP1's
        ``(module, recurse, nonwrapped_numel)`` form), or None (the whole model is one unit). A Module that
        calls ``fully_shard`` itself in ``configure_model`` keeps its own units.
    :param activation_checkpointing_policy: the same forms; those submodules recompute their activations in
        backward. ``None`` (default): none do.
    :param sharding_strategy: ``"FULL_SHARD"`` (default), ``"SHARD_GRAD_OP"``, ``"HYBRID_SHARD"`` or
        ``"_HYBRID_SHARD_ZERO2"`` (any case, or torch's ``ShardingStrategy``), as above; ``"NO_SHARD"`` is refused
        (use ``strategy="ddp"``).
    :param cpu_offload: True keeps the sharded parameters, gradients and optimizer state in CPU memory (or give
        a ``torch.distributed.fsdp.CPUOffloadPolicy``); False (default): on the device.
    :param state_dict_type: ``"sharded"`` (default; checkpoints are directories every rank writes its part to,
        loadable with any number of ranks, ``framework consolidate`` makes one file of them) or ``"full"``
        (one file, gathered on rank 0).
    :param mixed_precision: a ``MixedPrecisionPolicy`` in place of the one built from the precision (default ``None``).
    :param start_method: how the ranks no launcher started are started, as for DDP (default ``"auto"``).
    :param timeout: how long a collective may wait: a ``datetime.timedelta`` or seconds; ``None`` (default): 30 min.
    :param process_group_backend: ``None`` (default): ``"nccl"`` on CUDA, ``"gloo"`` elsewhere; or another backend.
    :param device_mesh: hybrid sharding only: ``(replicas, shard_size)``, two positive ints whose product is the
        number of ranks, or a 2-D ``DeviceMesh``; ``None`` (default): one group per node.
    :param checkpoint_io: what saves, loads and removes checkpoint files (``framework.plugins``); ``None``
        (default): ``TorchCheckpointIO``. ``Trainer(plugins=[...])`` replaces it.
    :param fully_shard_kwargs: other keyword arguments, for ``fully_shard`` (a name it does not take is refused).
    :raises MisconfigurationError: where an argument is none of the forms above (``"NO_SHARD"`` included), or
        ``fully_shard`` does not take a keyword of ``fully_shard_kwargs``.

    Example::

        Trainer(accelerator="cpu", devices=2, strategy=FSDPStrategy(auto_wrap_policy={Block}, cpu_offload=True))
    """

    name = "fsdp"
    replaces_parameters = True

    def __init__(self, auto_wrap_policy: Any = "auto", activation_checkpointing_policy: Any = None,
                 sharding_strategy: Any = "FULL_SHARD", cpu_offload: Any = False, state_dict_type: str = "sharded",
                 mixed_precision: Any = None, start_method: str = "auto", timeout: timedelta | float | None = None,
                 process_group_backend: str | None = None, device_mesh: Any = None,
                 checkpoint_io: CheckpointIO | None = None, **fully_shard_kwargs: Any) -> None:
        super().__init__(start_method, timeout, process_group_backend, checkpoint_io)
        # checked now, made predicates in setup_module (a started rank gets the strategy pickled: no lambdas here)
        wrap_policy(auto_wrap_policy)
        wrap_policy(activation_checkpointing_policy, "activation_checkpointing_policy")
        check_offload(cpu_offload)
        check_fully_shard_options(fully_shard_kwargs)
        self.auto_wrap_policy = auto_wrap_policy
        self.activation_checkpointing_policy = activation_checkpointing_policy
        self.sharding_strategy = sharding_name(sharding_strategy)
        self.cpu_offload = cpu_offload
        if state_dict_type not in STATE_DICT_TYPES:
            raise MisconfigurationError(
                f"FSDPStrategy(state_dict_type={describe(state_dict_type)}): accepted 'sharded' or 'full'."
            )
        self.state_dict_type = state_dict_type
        self.mixed_precision = mixed_precision
        check_device_mesh(device_mesh, self.sharding_strategy)
        self.hybrid_mesh = device_mesh  # the argument; the mesh itself is self.mesh
        self.fully_shard_kwargs = fully_shard_kwargs
        self._mesh: Any = None

    def connect(self, device: torch.device, precision: Any, ranks: Any = None) -> None:
        """As every strategy; a mesh made for other ranks (this object used before, in another run) is dropped.

        Autocast's weight cache is turned off: FSDP gives a unit new parameter tensors each time it
        gathers them, and a cached copy from an earlier forward in the same step cuts the later
        forward's weights off from their gradients (they come back None).
        """
        super().connect(device, precision, ranks)
        self._mesh = None
        if hasattr(precision, "autocast_cache"):
            precision.autocast_cache = False

    @property
    def reshard_after_forward(self) -> bool:
        """True for ZeRO-3 (parameters split again after each unit's forward), False for ZeRO-2."""
        return reshards_after_forward(self.sharding_strategy)

    # -- set-up ---
    def setup_environment(self) -> None:
        """Start the process group (fully_shard needs one even on one process) and the device mesh."""
        super().setup_environment()
        if not dist.is_initialized():
            start_process_group(self.backend, store=dist.HashStore(), rank=0, world_size=1)
            self._started_group = True

    def module_init_context(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager:
        """With ``empty_init=True``, modules are created on the meta device and allocated only once sharded."""
        return torch.device("meta") if empty_init else torch.device(self.device)

    @property
    def mesh(self) -> Any:
        """The device mesh ``fully_shard`` splits the parameters over: all ranks in one dimension, or for hybrid
        sharding two, ``("replicate", "shard")``.

        :raises MisconfigurationError: where the hybrid ``device_mesh``'s replicas times shard size is not the number
            of ranks.
        """
        if self._mesh is None:
            from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

            self.setup_environment()
            world = dist.get_world_size()
            if isinstance(self.hybrid_mesh, DeviceMesh):
                self._mesh = self.hybrid_mesh
            elif self.sharding_strategy in HYBRID:
                shape = tuple(self.hybrid_mesh or (world // self.ranks.local_world_size, self.ranks.local_world_size))
                if shape[0] * shape[1] != world:
                    raise MisconfigurationError(
                        f"FSDPStrategy(device_mesh={describe(self.hybrid_mesh)}): {shape[0]} replicas x {shape[1]} "
                        f"ranks each make {shape[0] * shape[1]} ranks, but this run has {world}.")
                self._mesh = init_device_mesh(self.device.type, shape, mesh_dim_names=("replicate", "shard"))
                quiet_redistribution_notes()
            else:
                self._mesh = init_device_mesh(self.device.type, (world,))
        return self._mesh

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Shard ``module``: each unit the policy picks, then the whole (the user's own units are kept).

        A module sharded already (by another Trainer in this process) keeps its sharding: FSDP
        cannot put the units it set up under a second root.
        """
        from torch.distributed.fsdp import FSDPModule, fully_shard

        earlier = module.__dict__.get(ROOT_ATTRIBUTE)
        if isinstance(earlier, StepRouter):
            return earlier

        on_meta = has_meta_tensors(module)
        if not on_meta:
            module = module.to(self.device)
        apply_checkpointing(module, self.activation_checkpointing_policy)
        options = self._shard_options()
        if not any(isinstance(sub, FSDPModule) for sub in module.modules()):
            for unit in units_to_shard(module, wrap_policy(self.auto_wrap_policy)):
                fully_shard(unit, **options)
        self._before_root_shard(module)
        router = StepRouter(module)
        fully_shard(router, **options)
        if on_meta:
            materialize(router, self.device)
        # FSDP sets itself up in the first forward; done now, a rank that evaluates no batch is set up too
        # (evaluating() then resets every rank's record of forward passes alike)
        router._get_fsdp_state()._lazy_init()
        module.__dict__[ROOT_ATTRIBUTE] = router  # not a submodule: the state dict stays the user's
        return router

    def _before_root_shard(self, module: nn.Module) -> None:
        """What a subclass does to the user's units before the outermost one is made (nothing here)."""

    def setup_optimizer(self, optimizer: Optimizer) -> Optimizer:
        """``optimizer`` as it is, once checked to hold the sharded parameters (an optimizer made from the module
        before it was sharded would step copies nobody uses).

        :raises MisconfigurationError: where ``optimizer`` holds parameters that are not sharded.
        """
        from torch.distributed.tensor import DTensor

        unsharded = sum(not isinstance(p, DTensor) for p in _parameters_of(optimizer))
        if unsharded:
            raise MisconfigurationError(
                f"The {type(optimizer).__name__} holds {unsharded} parameter(s) that are not sharded: it was made from "
                "the module before it was sharded, and fully_shard replaces every parameter. Pass both to "
                "runtime.setup(model, optimizer), or make the optimizer from the set-up module's parameters."
            )
        return optimizer

    def _shard_options(self) -> dict[str, Any]:
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy

        options: dict[str, Any] = {"mesh": self.mesh, "reshard_after_forward": self.reshard_after_forward}
        precision = self.precision
        param_dtype = None if precision.param_dtype == torch.float32 else precision.param_dtype
        options["mp_policy"] = self.mixed_precision or MixedPrecisionPolicy(param_dtype=param_dtype,
                                                                            reduce_dtype=precision.reduce_dtype)
        if isinstance(self.cpu_offload, OffloadPolicy):
            options["offload_policy"] = self.cpu_offload
        elif self.cpu_offload:
            options["offload_policy"] = CPUOffloadPolicy(pin_memory=self.device.type == "cuda")
        return {**options, **self.fully_shard_kwargs}

    def unwrap(self, module: nn.Module) -> nn.Module:
        """The user's module inside the sharded step router."""
        return module.module if isinstance(module, StepRouter) else module

    # -- the step ---
    def step_function(self, model: nn.Module, name: str, synced: bool | None = None,
                      method: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """Every step (training and evaluation) runs through the sharded root's forward, whose hooks gather the
        parameters it needs."""
        step = method if method is not None else getattr(self.unwrap(model), name)
        if isinstance(model, StepRouter):
            return routed(model, model, step)
        return step

    def no_backward_sync(self, module: nn.Module, enabled: bool = True) -> contextlib.AbstractContextManager:
        """Gradients of micro-batches inside this context accumulate unreduced (``set_requires_gradient_sync``)."""
        if not enabled or not hasattr(module, "set_requires_gradient_sync"):
            return contextlib.nullcontext()
        return without_gradient_sync(module)

    @contextlib.contextmanager
    def evaluating(self, model: nn.Module, every_rank_same_batches: bool) -> Iterator[None]:
        """Where ranks run different numbers of evaluation batches, gather the parameters once for the whole
        evaluation, so its forward passes need no collective (the ranks' all-gathers would not pair up).

        Afterwards FSDP forgets the evaluation's forward passes: it records each forward's order to
        prefetch in the next backward, and a rank that evaluated more batches would prefetch in
        another order than the others (a hang in the first training step).
        """
        if not isinstance(model, StepRouter):
            yield
            return
        units = [] if every_rank_same_batches or self.world_size == 1 else sharded_units(model)
        for unit in units:
            unit.set_reshard_after_forward(False, recurse=False)
            unit.unshard()
        try:
            yield
        finally:
            for unit in units:
                unit.reshard()
                unit.set_reshard_after_forward(self.reshard_after_forward, recurse=False)
            forget_forward_passes(model)

    @property
    def supports_inference_mode(self) -> bool:
        """False: FSDP writes into its parameters in forward, which inference tensors forbid (no_grad instead)."""
        return False

    def clip_gradients_norm(self, module: nn.Module, optimizer: Optimizer, max_norm: float, norm_type: float = 2.0,
                            error_if_nonfinite: bool = False) -> torch.Tensor:
        """Clip to a total norm taken over every rank's part of the gradients (the whole model's norm).

        :raises RuntimeError: with ``error_if_nonfinite``, where the total norm is inf or nan.
        """
        self.precision.unscale(optimizer)
        parameters = [p for p in _parameters_of(optimizer) if p.grad is not None]
        total = total_norm([p.grad for p in parameters], norm_type)
        if error_if_nonfinite and not torch.isfinite(total):
            raise RuntimeError(f"The total norm of order {norm_type} of the gradients is {total.item()}, so they "
                               "cannot be clipped. Pass error_if_nonfinite=False to clip anyway.")
        clip_with_norm(parameters, max_norm, total)
        return total

    def broadcast_buffers(self, module: nn.Module) -> None:
        """Give every rank rank 0's buffers (FSDP leaves them whole and unsynced: BatchNorm statistics drift apart).

        Run before each evaluation and each checkpoint, so every rank evaluates, and every
        checkpoint holds, the model rank 0 holds, as with DDP.
        """
        buffers = list(module.buffers())
        if self._in_group() and buffers:
            broadcast_from_rank_zero(buffers)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(device={self.device}, world_size={self.world_size}, "
                f"sharding_strategy={self.sharding_strategy!r}, cpu_offload={bool(self.cpu_offload)})")
