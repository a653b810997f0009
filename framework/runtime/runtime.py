"""The Runtime: device, Strategy and Precision in one object, usable without the Trainer."""

import atexit
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from framework.errors import MisconfigurationError, describe
from framework.nested import map_tensors, move_to_device
from framework.precision import Precision, resolve_precision
from framework.runtime.compile import StepCompiler, compile_options
from framework.runtime.data_split import shard_loader
from framework.runtime.devices import device_for, resolve_accelerator, resolve_devices
from framework.runtime.environment import ClusterEnvironment, check_matches_launcher, detect_environment
from framework.runtime.reporting import agree_on_runs, as_list, call_hook, finalize, log_to
from framework.runtime.saving import load_object, restore_into, state_dicts
from framework.runtime.wrappers import (
    RuntimeDataLoader,
    RuntimeModule,
    RuntimeOptimizer,
    forward_module,
    original_optimizer,
)
from framework.seed import restore_rng_states, rng_states, seed_everything
from framework.strategies import Ranks, Strategy, resolve_strategy
from framework.utilities.rank_zero import set_rank


class Runtime:
    """Everything a training loop needs that depends on hardware, precision or distribution.

    The ``Trainer`` is built on it; people who keep their own loop use it directly, with
    Lightning Fabric's names (``from framework import Runtime as Fabric`` runs a Fabric script)::

        runtime = Runtime(accelerator="cpu", devices=2, precision="bf16-mixed", loggers=CSVLogger("logs"))
        runtime.launch()
        model, optimizer = runtime.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
        loader = runtime.setup_dataloaders(loader)
        for x, y in loader:                     # on the device; each rank its share of the data
            loss = torch.nn.functional.mse_loss(model(x), y)   # under autocast, through DDP
            runtime.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            runtime.log("loss", loss)

    ``callbacks``: objects whose methods ``runtime.call(name, ...)`` calls; ``loggers``:
    objects with ``log_metrics(metrics, step)`` (``framework.loggers``), written to by rank 0.
    """

    def __init__(
        self,
        *,
        accelerator: str = "auto",
        strategy: str | Strategy = "auto",
        devices: int | str | list[int] = "auto",
        num_nodes: int = 1,
        precision: str | int | Precision | None = None,
        plugins: Any = None,
        callbacks: Any = None,
        loggers: Any = None,
        compile: bool | dict[str, Any] = False,
    ) -> None:
        if not isinstance(num_nodes, int) or isinstance(num_nodes, bool) or num_nodes < 1:
            raise MisconfigurationError(f"num_nodes={describe(num_nodes)} must be a positive int.")
        if plugins is not None:
            raise MisconfigurationError(
                f"Runtime(plugins={describe(plugins)}): accepted is None; precision= and strategy= take those "
                "choices. (AsyncCheckpointIO is a Trainer plugin: runtime.save writes at once.)"
            )
        self.accelerator = resolve_accelerator(accelerator)
        self.environment = detect_environment()
        launched = self.environment is not None and self.environment.world_size > 1
        self.device_ids = resolve_devices(devices, self.accelerator)
        if devices == "auto":
            # one device per process: as many as the launcher started on this node, else one
            count = self.environment.local_world_size if launched else 1
            self.device_ids = list(range(count)) if self.accelerator != "cuda" else self.device_ids[:count]
        self.num_nodes = num_nodes
        world_size = len(self.device_ids) * num_nodes
        if isinstance(strategy, str) and strategy.lower() == "auto":
            strategy = "ddp" if world_size > 1 else "single"
        self.strategy = resolve_strategy(strategy)
        self.precision = resolve_precision("32-true" if precision is None else precision)
        self.compile_options = compile_options(compile)
        self._compiler: StepCompiler | None = None
        self.callbacks = as_list(callbacks)
        self._loggers = as_list(loggers)
        self._unflushed_logs = False  # log_dict sent something the loggers may still buffer
        self._loggers_agreed = False  # every rank's loggers name rank 0's run
        if world_size > 1 and not self.strategy.multi_process:
            raise MisconfigurationError(
                f"devices={devices!r} with num_nodes={num_nodes} needs one process per device, which strategy="
                f"{strategy!r} ({type(self.strategy).__name__}) does not do. Use devices=1, or strategy='ddp'."
            )
        if launched:
            check_matches_launcher(self.environment, devices, len(self.device_ids), num_nodes)
            ranks = _attached_ranks(self.environment)
        else:
            self.environment = None
            ranks = Ranks(world_size=world_size, local_world_size=len(self.device_ids))
        self._connect(ranks)
        if launched:
            _share_cores(ranks.local_world_size)

    def _connect(self, ranks: Ranks) -> None:
        self.device = device_for(self.accelerator, self.device_ids[ranks.local_rank])
        self.precision.connect(self.device)
        self.strategy.connect(self.device, self.precision, ranks)
        set_rank(ranks.global_rank)  # for the user's @rank_zero_only functions

    # -- launching ---
    @property
    def needs_launch(self) -> bool:
        """Whether this run wants several processes that nobody has started yet (no torchrun, SLURM ... around)."""
        return self.world_size > 1 and self.environment is None

    def launch(self, function: Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        """Start the processes and run ``function(runtime, *args, **kwargs)`` on each; returns rank 0's result.

        Without ``function``, the rest of the script runs on every rank: this process becomes
        rank 0 and starts the others as new runs of the script (or joins the ranks ``framework
        launch``, torchrun or SLURM started). On one process, ``function`` runs right here.

        Example::

            def train(runtime, epochs):
                model, optimizer = runtime.setup(model, optimizer)
                ...

            Runtime(accelerator="cpu", devices=2, strategy="ddp").launch(train, 3)
        """
        if function is None:
            if self.needs_launch:
                requested = getattr(self.strategy, "start_method", "auto")
                if requested not in ("auto", "popen") or self.num_nodes > 1:
                    raise MisconfigurationError(
                        f"runtime.launch() without a function cannot start ranks with strategy={self.strategy.name!r} "
                        f"({requested}) or on several nodes. Call runtime.launch(train) with the "
                        "training in a function, or start the script with `framework launch` (or torchrun)."
                    )
                self.become_rank_zero()
            self.setup_environment()
            return None
        return self.run_in_ranks(function, *args, **kwargs)[0]

    def start_method(self) -> str | None:
        """How this run's ranks start: None where they need no starting (one process, or a launcher started
        them); else ``"fork"``, ``"forkserver"``, ``"spawn"`` or ``"popen"`` (the script run again), by the rule in
        ``framework.runtime.start_method``."""
        if not self.needs_launch:
            return None
        from framework.runtime.relaunch import script_command
        from framework.runtime.start_method import choose_start_method

        return choose_start_method(getattr(self.strategy, "start_method", "auto"), script_command() is not None)

    def run_in_ranks(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """``function(runtime, *args, **kwargs)`` on every rank; the results of the ranks this process waited for.

        Where ranks are forked or spawned, this process waits for all of them and gets every
        rank's result; where the script is run again (``"popen"``), this process is rank 0 and
        gets its own.
        """
        if not callable(function):
            raise TypeError(f"launch(function={describe(function)}): the function must be callable.")
        method = self.start_method()
        if method in ("fork", "forkserver", "spawn"):
            from framework.runtime.launchers import start_processes

            return start_processes(_run_as_rank, (self, rng_states(), function, args, kwargs), self.world_size,
                                   method, self._rank_environment())
        if method == "popen":
            self.become_rank_zero()
        self.setup_environment()
        return [function(self, *args, **kwargs)]

    def become_rank_zero(self) -> None:
        """Start ranks 1 .. N-1 as new runs of this script and join them as rank 0 (everything after runs on every
        rank)."""
        from framework.runtime.relaunch import relaunch_script

        relaunch_script(self.world_size)
        self._join_launched()

    def _rank_environment(self) -> dict[str, str]:
        """What forked or spawned ranks get in their environment: a CPU run's ranks see no CUDA device, so neither
        torch (Adam's step, ``pin_memory``, torch.compile) nor user code initialise CUDA in them. Not for ranks
        that run the script again: rank 0, this process, sees the devices, and the ranks must agree (torch's
        DeviceMesh makes one more process group where CUDA is available)."""
        return {"CUDA_VISIBLE_DEVICES": ""} if self.accelerator == "cpu" else {}

    def _join_launched(self) -> None:
        """In a process the launcher started: take up this rank's device and share the machine's cores."""
        self.environment = detect_environment()
        ranks = _attached_ranks(self.environment)
        self._connect(ranks)
        _share_cores(ranks.local_world_size)

    # -- ranks ---
    @property
    def world_size(self) -> int:
        """Number of processes taking part, over all nodes."""
        return self.strategy.world_size

    @property
    def global_rank(self) -> int:
        """This process's index among all processes."""
        return self.strategy.global_rank

    @property
    def local_rank(self) -> int:
        """This process's index on its node."""
        return self.strategy.local_rank

    @property
    def node_rank(self) -> int:
        """This node's index."""
        return self.strategy.node_rank

    @property
    def is_global_zero(self) -> bool:
        """Whether this process is global rank 0."""
        return self.strategy.is_global_zero

    # -- set-up --------------------------------------------------------------------------------------
    def setup_environment(self) -> None:
        """Let the strategy set up its environment (start the process group, where there is one)."""
        self._check_launched("setup")
        self.strategy.setup_environment()
        if self._loggers and self.world_size > 1 and not self._loggers_agreed:
            self._loggers_agreed = True
            agree_on_runs(self._loggers, self.broadcast)

    def _check_launched(self, method: str) -> None:
        if self.needs_launch:
            raise MisconfigurationError(
                f"runtime.{method}() before the {self.world_size} processes of this Runtime were started: call "
                "runtime.launch() (or runtime.launch(function)) first, or start the script with `framework "
                "launch` or torchrun."
            )

    @contextlib.contextmanager
    def init_tensor(self) -> Iterator[None]:
        """Create tensors inside this block on the device, in the precision's parameter dtype ("*-true")."""
        with torch.device(self.device), self.precision.module_init_context():
            yield

    @contextlib.contextmanager
    def init_module(self, empty_init: bool | None = None) -> Iterator[None]:
        """Create modules inside this block directly on the device, in the precision's parameter dtype.

        Example::

            with runtime.init_module():
                model = torch.nn.Linear(1024, 1024)   # on the device, bf16 under "bf16-true"
        """
        with self.strategy.module_init_context(empty_init), self.precision.module_init_context():
            yield

    def wrap_module(self, module: nn.Module) -> nn.Module:
        """Convert ``module`` for the precision, place/wrap it for the strategy (DDP ...), compile it if asked.

        What the Trainer uses; ``setup_module`` adds the ``RuntimeModule`` wrapper on top.
        """
        module = self.strategy.setup_module(self.precision.convert_module(module))
        if self.compiler is not None:
            self.compiler.module(self.strategy.unwrap(module))  # the wrapper (DDP, FSDP) stays eager around it
        return module

    @property
    def compiler(self) -> StepCompiler | None:
        """What compiles the module's forward and its step methods, as ``compile=`` asked; None without it."""
        if self._compiler is None and self.compile_options is not None:
            self._compiler = StepCompiler.from_options(self.compile_options)
        return self._compiler

    def setup_optimizer(self, optimizer: Optimizer) -> Optimizer:
        """``optimizer`` as the strategy needs it (wrapped where it shards optimizer state), without a wrapper."""
        return self.strategy.setup_optimizer(optimizer)

    def setup(self, module: nn.Module, *optimizers: Optimizer, scheduler: Any = None,
              move_to_device: bool = True) -> Any:
        """Set up ``module`` and ``optimizers``; returns the module, or ``(module, *optimizers[, scheduler])``.

        The returned module runs forward under the precision's autocast (and through DDP's
        forward); the returned optimizers step through the precision. Both stand in for the
        originals (``model.module`` and ``optimizer.optimizer`` are the originals). A
        ``scheduler`` is handed back as it is, last, as Fabric does.

        Example::

            model, optimizer = runtime.setup(model, torch.optim.AdamW(model.parameters()))
        """
        names = {parameter: name for name, parameter in module.named_parameters()}
        module = self.setup_module(module, move_to_device=move_to_device)
        if not optimizers and scheduler is None:
            return module
        use_set_up_parameters(optimizers, names, self.strategy.unwrap(module.module), self.strategy.name)
        wrapped = [RuntimeOptimizer(self.setup_optimizer(optimizer), self) for optimizer in optimizers]
        return (module, *wrapped) if scheduler is None else (module, *wrapped, scheduler)

    def setup_module(self, module: nn.Module, move_to_device: bool = True,
                     float_outputs: bool = False) -> RuntimeModule:
        """``module`` set up alone (optimizers may come later, from ``setup_optimizers``).

        ``float_outputs``: what forward computed in float16/bfloat16 under autocast comes back in
        float32, as Accelerate's prepared models return it.
        """
        if isinstance(module, RuntimeModule):
            raise MisconfigurationError("runtime.setup_module got a module that was set up already; pass the original.")
        self.setup_environment()
        original = module
        if not move_to_device:
            module = self.precision.convert_module(module)
            wrapped = module if self.world_size == 1 else self.strategy.setup_module(module)
        else:
            wrapped = self.wrap_module(module)
        return RuntimeModule(wrapped, original, self, float_outputs)

    def setup_optimizers(self, *optimizers: Optimizer) -> Any:
        """The optimizers set up to step through the precision; one, or a tuple of several."""
        wrapped = tuple(RuntimeOptimizer(self.setup_optimizer(optimizer), self) for optimizer in optimizers)
        return wrapped[0] if len(wrapped) == 1 else wrapped

    def setup_dataloaders(self, *dataloaders: Any, use_distributed_sampler: bool = True, move_to_device: bool = True,
                          even_batches: bool = True) -> Any:
        """Each loader sharded over the ranks and moving its batches to the device; one, or a list of several.

        As in Fabric, a DataLoader gets a ``DistributedSampler``, padded with repeated samples so all
        ranks run as many batches; a shuffling one reshuffles every pass, the same way on every
        rank, from a seed drawn from torch's generator (so ``seed_everything`` decides it).
        ``even_batches=False`` (Accelerate's name) deals an unshuffled loader out without
        repeats instead, so counts summed over the ranks are exact (evaluation); a rank may then
        run one batch fewer, so such a loop must hold no per-batch collective (no DDP training).

        Example::

            train = runtime.setup_dataloaders(train)
            val = runtime.setup_dataloaders(val, even_batches=False)
        """
        if not dataloaders:
            raise TypeError("setup_dataloaders needs at least one dataloader.")
        self._check_launched("setup_dataloaders")
        wrapped = [
            RuntimeDataLoader(self._sharded(loader, even_batches) if use_distributed_sampler and self.world_size > 1
                              else loader, self.device if move_to_device else None, self.to_device)
            for loader in dataloaders
        ]
        return wrapped[0] if len(wrapped) == 1 else wrapped

    def _sharded(self, loader: Any, even_batches: bool) -> Any:
        # the strategy's split: under tensor parallelism the ranks of a group read the same batches
        shards = self.strategy.distributed_sampler_kwargs or {"num_replicas": self.world_size, "rank": self.global_rank}
        return shard_loader(loader, shards["num_replicas"], shards["rank"], self.agreed_seed, even_batches)

    def agreed_seed(self, generator: torch.Generator | None = None) -> int:
        """A seed every rank draws from ``generator`` (torch's global one by default), rank 0's kept on all: what
        shuffled orders shared by the ranks start from, decided by ``seed_everything``."""
        return self.broadcast(int(torch.randint(0, 2**31, (), generator=generator)))

    def to_device(self, batch: Any) -> Any:
        """``batch`` (tensors in any nesting, or a module) on this runtime's device, inputs cast for the precision."""
        if isinstance(batch, nn.Module):
            return batch.to(self.device)
        return self.precision.convert_input(move_to_device(batch, self.device))

    # -- the step ---
    def autocast(self) -> contextlib.AbstractContextManager:
        """The precision's context for forward passes (one that does nothing in ``"32-true"``)."""
        return self.precision.autocast()

    def backward(self, tensor: torch.Tensor, *args: Any, model: nn.Module | None = None, **kwargs: Any) -> None:
        """``tensor.backward()`` through the strategy and precision (fp16: the loss is scaled first)."""
        self.strategy.backward(tensor, model if model is None else forward_module(model), *args, **kwargs)

    def optimizer_step(self, optimizer: Optimizer, closure: Any = None, **kwargs: Any) -> bool:
        """Step ``optimizer`` through the precision; False when the step was skipped."""
        return self.strategy.optimizer_step(original_optimizer(optimizer), closure, **kwargs)

    def clip_gradients(
        self,
        module: nn.Module,
        optimizer: Optimizer,
        clip_val: float | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        error_if_nonfinite: bool = True,
    ) -> torch.Tensor | None:
        """Clip by value (``clip_val``) or by total norm (``max_norm``); returns the norm when clipping by norm.

        With fp16 the gradients are unscaled first. ``error_if_nonfinite``, as in
        Fabric: a total norm that is inf or nan raises (pass False to clip anyway).
        """
        if (clip_val is None) == (max_norm is None):
            raise MisconfigurationError("clip_gradients needs exactly one of clip_val= or max_norm=.")
        module, optimizer = forward_module(module), original_optimizer(optimizer)
        if max_norm is not None:
            return self.strategy.clip_gradients_norm(module, optimizer, float(max_norm), norm_type,
                                                     error_if_nonfinite=error_if_nonfinite)
        self.strategy.clip_gradients_value(module, optimizer, float(clip_val))
        return None

    def no_backward_sync(self, module: nn.Module, enabled: bool = True) -> contextlib.AbstractContextManager:
        """Skip the gradient all-reduce inside this context (gradient accumulation micro-batches).

        Example::

            with runtime.no_backward_sync(model, enabled=not is_last_micro_batch):
                runtime.backward(model(x).sum())
        """
        return self.strategy.no_backward_sync(forward_module(module), enabled)

    # -- collectives ---
    def all_reduce(self, data: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        """Each tensor (or number) in ``data`` reduced over all ranks ("mean", "sum", "max", "min"); new tensors."""
        _only_default_group(group)
        return map_tensors(_numbers_as_tensors(data, self.device), lambda t: self.strategy.all_reduce(t, reduce_op))

    def all_gather(self, data: Any, group: Any = None, sync_grads: bool = False) -> Any:
        """Each tensor in ``data`` from every rank, stacked along a new first dimension (of size world_size)."""
        _only_default_group(group)
        if sync_grads and self.world_size > 1:
            from torch.distributed.nn.functional import all_gather

            return map_tensors(_numbers_as_tensors(data, self.device), lambda t: torch.stack(all_gather(t)))
        return map_tensors(_numbers_as_tensors(data, self.device), self.strategy.all_gather)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """``obj`` (any picklable object) as rank ``src`` has it, on every rank; ``obj`` itself on one process."""
        return self.strategy.broadcast(obj, src)

    def barrier(self, name: str | None = None) -> None:
        """Wait until every rank gets here; returns at once on one process."""
        self.strategy.barrier(name)

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """One decision for all ranks: every rank's (``all=True``) or any rank's; ``decision`` on one process."""
        return self.strategy.reduce_boolean_decision(decision, all)

    @contextlib.contextmanager
    def rank_zero_first(self, local: bool = False) -> Iterator[None]:
        """Run the block on rank 0 (of the node, with ``local``) first, then on the others (a download, say).

        Example::

            with runtime.rank_zero_first():
                dataset = MNIST("data", download=True)
        """
        first = (self.local_rank if local else self.global_rank) == 0
        if not first:
            self.barrier("rank_zero_first")
        yield
        if first:
            self.barrier("rank_zero_first")

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on each node's first process only."""
        if self.local_rank == 0:
            print(*args, **kwargs)

    # -- callbacks and loggers ---
    @property
    def loggers(self) -> list[Any]:
        """The loggers given as ``loggers=``."""
        return self._loggers

    @property
    def logger(self) -> Any:
        """The first logger, or None without loggers."""
        return self._loggers[0] if self._loggers else None

    def call(self, hook_name: str, *args: Any, **kwargs: Any) -> None:
        """Call the method ``hook_name`` of every callback that has one (keyword arguments it does not take left out).

        Example::

            runtime = Runtime(callbacks=[PrintLoss()])
            runtime.call("on_train_batch_end", loss=loss, batch_idx=index)
        """
        call_hook(self.callbacks, hook_name, args, kwargs)

    def log(self, name: str, value: Any, step: int | None = None) -> None:
        """Send one number (or a one-element tensor) to every logger, on global rank 0."""
        self.log_dict({name: value}, step=step)

    def log_dict(self, metrics: dict[str, Any], step: int | None = None) -> None:
        """Send ``metrics`` (numbers or one-element tensors) to every logger, on global rank 0.

        Loggers write what they buffered when the process (or ``launch``'s function) ends.
        """
        if self._loggers and self.is_global_zero:
            log_to(self._loggers, metrics, step)
            if not self._unflushed_logs:
                self._unflushed_logs = True
                atexit.register(self._finalize_loggers)

    def _finalize_loggers(self, status: str | None = None) -> None:
        """Let the loggers write what they buffered (Fabric leaves that to the user, and loses it when they forget)."""
        if not self._unflushed_logs:
            return
        self._unflushed_logs = False
        if status is None:
            status = "failed" if getattr(sys, "last_value", None) is not None else "success"
        finalize(self._loggers, status)

    @staticmethod
    def seed_everything(seed: int | None = None, workers: bool | None = None, verbose: bool = True) -> int:
        """Seed Python, NumPy and torch (see ``framework.seed_everything``); returns the seed."""
        return seed_everything(seed, workers=bool(workers), verbose=verbose)

    # -- files ---
    def save(self, path: str | os.PathLike, state: dict[str, Any], filter: dict[str, Callable] | None = None) -> None:
        """Save ``state`` (written by rank 0); modules and optimizers in it are saved as their ``state_dict()``.

        ``filter`` maps a key of ``state`` to ``fn(name, value) -> bool`` choosing which entries of
        that object's state dict are kept (e.g. only the trainable parameters).
        """
        self.strategy.save_checkpoint(state_dicts(state, self.strategy, filter or {}), os.fspath(path))

    def load(self, path: str | os.PathLike, state: dict[str, Any] | None = None, strict: bool = True, *,
             weights_only: bool | None = None) -> dict[str, Any]:
        """Load a checkpoint into ``state``: objects with ``load_state_dict`` in place, plain values replaced in
        ``state``; returns what the checkpoint holds beyond ``state``'s keys (everything without ``state``).

        ``strict``: a key of ``state`` missing from the checkpoint, or a module key mismatch, raises.
        ``weights_only=False`` also unpickles arbitrary objects (only for files you trust).
        """
        checkpoint = self.strategy.load_checkpoint(os.fspath(path), weights_only=weights_only)
        self.barrier("load")
        if state is not None:
            restore_into(state, checkpoint, self.strategy, strict, os.fspath(path))
        return checkpoint

    def load_raw(self, path: str | os.PathLike, obj: nn.Module | Optimizer, strict: bool = True, *,
                 weights_only: bool | None = None) -> None:
        """Load a plain state-dict file (``torch.save(model.state_dict(), path)``) into a module or optimizer.

        Example::

            runtime.load_raw("pretrained.pt", model)
        """
        if not isinstance(obj, nn.Module) and not callable(getattr(obj, "load_state_dict", None)):
            raise TypeError(f"load_raw(obj={describe(obj)}): obj must be a torch.nn.Module or an optimizer.")
        state_dict = self.strategy.load_checkpoint(os.fspath(path), weights_only=weights_only)
        self.barrier("load_raw")
        load_object(obj, state_dict, self.strategy, strict)

    def teardown(self) -> None:
        """Undo ``setup_environment`` (end the process group, where there is one)."""
        self.strategy.teardown()

    def __repr__(self) -> str:
        return f"Runtime(device={self.device}, strategy={self.strategy!r}, precision={self.precision!r})"


def _attached_ranks(environment: ClusterEnvironment) -> Ranks:
    """The ranks a launcher set up, with rank 0's address exported where torch's process group reads it
    (torchrun sets MASTER_ADDR/MASTER_PORT, SLURM does not)."""
    os.environ.setdefault("MASTER_ADDR", environment.main_address)
    os.environ.setdefault("MASTER_PORT", str(environment.main_port))
    from framework.runtime.peer_failure import share_failures_with_peers  # only under a launcher: not at import

    share_failures_with_peers()
    return Ranks(world_size=environment.world_size, global_rank=environment.global_rank,
                  local_rank=environment.local_rank, node_rank=environment.node_rank,
                  local_world_size=environment.local_world_size)


def _share_cores(local_world_size: int) -> None:
    """Each of a node's processes takes its share of the CPU cores, unless OMP_NUM_THREADS already decided."""
    if local_world_size < 2 or "OMP_NUM_THREADS" in os.environ:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(max(1, cores // local_world_size))


def _run_as_rank(runtime: Runtime, rng: dict[str, Any], function: Callable[..., Any], args: tuple,
                 kwargs: dict[str, Any]) -> Any:
    """What each started process runs: join the ranks, draw random numbers as the caller would, run, end."""
    runtime._join_launched()
    restore_rng_states(rng)
    runtime.setup_environment()
    try:
        result = function(runtime, *args, **kwargs)
    except BaseException:
        runtime._finalize_loggers("failed")
        raise
    runtime._finalize_loggers("success")  # a started rank ends without running atexit handlers
    runtime.strategy.end_process_group()
    return result


def use_set_up_parameters(optimizers: tuple[Optimizer, ...], names: dict[nn.Parameter, str],
                          module: nn.Module, strategy: str) -> None:
    """Point optimizers made before ``setup`` at the parameters the strategy put in their place (fully_shard
    replaces each parameter with a sharded one), so ``runtime.setup(model, optimizer)`` works for every
    strategy; Fabric makes FSDP users set up the module first."""
    current = dict(module.named_parameters())
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            replaced = [current.get(names.get(parameter, ""), parameter) for parameter in group["params"]]
            if any(new is not old for new, old in zip(replaced, group["params"], strict=True)):
                if optimizer.state:
                    raise MisconfigurationError(
                        f"runtime.setup got a {type(optimizer).__name__} that has stepped already, and strategy="
                        f"{strategy!r} replaces the parameters it holds. Create the optimizer before its "
                        "first step, or set the module up first and build the optimizer from its parameters."
                    )
                group["params"] = replaced


def _numbers_as_tensors(data: Any, device: torch.device) -> Any:
    """``data`` with every Python number in it (at any depth) made a tensor on ``device``, as Fabric's collectives
    take them."""
    def as_tensor(value: Any) -> Any:
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return torch.tensor(value, device=device) if is_number else value

    return map_tensors(data, lambda tensor: tensor, other=as_tensor)


def _only_default_group(group: Any) -> None:
    if group is not None:
        raise MisconfigurationError("group= is not supported: collectives run over all ranks (group=None).")
