"""The Runtime: device, Strategy and Precision in one object, usable without the Trainer.

This module holds its set-up; the class takes the step (``step_methods.py``), the starting of its ranks
(``rank_start.py``), collectives (``collectives.py``), loggers (``reporting.py``) and files (``saving.py``) from
the modules beside it.
"""

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from framework.checks import is_int
from framework.errors import MisconfigurationError, describe
from framework.nested import move_to_device
from framework.precision import Precision, resolve_precision
from framework.runtime.collectives import CollectiveMethods
from framework.runtime.compile import StepCompiler, compile_options
from framework.runtime.data_split import shard_loader
from framework.runtime.devices import device_for, pinned, resolve_accelerator, resolve_devices
from framework.runtime.environment import check_matches_launcher, environment_for
from framework.runtime.plugins import Plugin, checked_checkpoint_io, sort_plugins
from framework.runtime.rank_start import LaunchMethods, attached_ranks, share_cores
from framework.runtime.reporting import LoggerMethods, agree_on_runs, as_list
from framework.runtime.saving import FileMethods
from framework.runtime.step_methods import StepMethods
from framework.runtime.wrappers import (
    RuntimeDataLoader,
    RuntimeModule,
    RuntimeOptimizer,
)
from framework.seed import seed_everything
from framework.strategies import Ranks, Strategy, resolve_strategy
from framework.utilities.rank_zero import set_rank


class Runtime(StepMethods, LaunchMethods, CollectiveMethods, LoggerMethods, FileMethods):
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

    :param accelerator: ``"cpu"``, ``"cuda"`` (or ``"gpu"``), ``"mps"``; ``"auto"`` (the default): CUDA, else MPS,
        else the CPU.
    :param strategy: a name (``"ddp"``, ``"fsdp"``, ``"zero2"`` ...) or a ``Strategy``; ``"auto"`` (the default):
        DDP where there are several processes, else one device.
    :param devices: devices (on the CPU: processes) per node: an int, ``-1`` for all, a list of indices or a
        string such as ``"0,1"``; ``"auto"`` (the default): one, or as many as a launcher started on this node.
    :param num_nodes: the number of machines (default 1); the run has ``devices`` times ``num_nodes`` processes,
        started by a launcher on each machine (``framework launch``, torchrun, SLURM).
    :param precision: as the Trainer's: ``"32-true"`` (what ``None``, the default, means), ``"16-mixed"``,
        ``"bf16-mixed"``, ``"16-true"``, ``"bf16-true"``, ``"64-true"``, a short spelling, or a ``Precision``.
    :param plugins: ``None`` (the default), or a plugin or a list of them from ``framework.plugins``: one
        ``CheckpointIO`` (what ``save``, ``load`` and the Trainer's checkpoints go through), one precision plugin
        (instead of ``precision``), one ``ClusterEnvironment``.
    :param callbacks: an object or a list of them, whose methods ``runtime.call(name, ...)`` calls; ``None``: none.
    :param loggers: an object or a list of them with ``log_metrics(metrics, step)`` (``framework.loggers``),
        written to by global rank 0; ``None``: none.
    :param compile: ``True`` runs the set-up module's ``forward`` and ``training_step`` (and the methods marked
        with ``mark_forward_method``) under ``torch.compile``; a dict gives its keyword arguments; ``False``: eager.
    :raises MisconfigurationError: where an argument is none of those accepted above (``num_nodes`` not a positive
        int, ``plugins`` holding two of a kind or a precision plugin beside ``precision``, ...); where the
        accelerator or the devices asked for are not on this machine; where several processes are asked of a
        strategy that runs one; or where ``devices`` and ``num_nodes`` differ from what the launcher started (or
        ``num_nodes`` is over 1 and no launcher started this process).
    """

    def __init__(
        self,
        *,
        accelerator: str = "auto",
        strategy: str | Strategy = "auto",
        devices: int | str | list[int] = "auto",
        num_nodes: int = 1,
        precision: str | int | Precision | None = None,
        plugins: Plugin | list[Plugin] | None = None,
        callbacks: Any = None,
        loggers: Any = None,
        compile: bool | dict[str, Any] = False,
    ) -> None:
        if not is_int(num_nodes) or num_nodes < 1:
            raise MisconfigurationError(f"num_nodes={describe(num_nodes)} must be a positive int.")
        given = sort_plugins(plugins, precision)
        self.accelerator = resolve_accelerator(accelerator)
        #: The cluster environment given in ``plugins=``, or None (Lightning's ``strategy.cluster_environment``).
        self.cluster_environment = given.environment
        self.environment = environment_for(given.environment, num_nodes)
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
        if getattr(self.strategy, "requested_device", None) is not None:
            self.device_ids = pinned(self.strategy.requested_device, self.accelerator, self.device_ids)
        if given.checkpoint_io is not None:  # over the strategy's own, as in Lightning
            self.strategy.checkpoint_io = checked_checkpoint_io(given.checkpoint_io, self.strategy)
        self.precision = self.strategy.precision_for(
            given.precision or resolve_precision("32-true" if precision is None else precision))
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
            ranks = attached_ranks(self.environment)
        else:
            if num_nodes > 1:  # the ranks of the other machines would never start: refuse rather than hang or crash
                raise MisconfigurationError(
                    f"num_nodes={num_nodes} needs a launcher on each machine, and none started this process. Run "
                    f"`framework launch --nproc-per-node {len(self.device_ids)} --nnodes {num_nodes} --node-rank <k> "
                    "--master-addr <machine 0> script.py` on each machine (or srun under SLURM), or use num_nodes=1."
                )
            self.environment = None
            ranks = Ranks(world_size=world_size, local_world_size=len(self.device_ids))
        self._connect(ranks)
        if launched:
            share_cores(ranks.local_world_size)

    def _connect(self, ranks: Ranks) -> None:
        self.device = device_for(self.accelerator, self.device_ids[ranks.local_rank])
        self.precision.connect(self.device)
        self.strategy.connect(self.device, self.precision, ranks)
        set_rank(ranks.global_rank)  # for the user's @rank_zero_only functions

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
        """Create tensors inside this block on the device, in the precision's parameter dtype (``"*-true"``)."""
        with torch.device(self.device), self.precision.module_init_context():
            yield

    @contextlib.contextmanager
    def init_module(self, empty_init: bool | None = None) -> Iterator[None]:
        """Create modules inside this block directly on the device, in the precision's parameter dtype.

        Example::

            with runtime.init_module():
                model = torch.nn.Linear(1024, 1024)   # on the device, bf16 under "bf16-true"

        :param empty_init: ``True``: under FSDP, parameters are made on the meta device and allocated once
            sharded; otherwise (and with ``None``, the default) on the device.
        """
        with self.strategy.module_init_context(empty_init), self.precision.module_init_context():
            yield

    def wrap_module(self, module: nn.Module) -> nn.Module:
        """Convert ``module`` for the precision, place/wrap it for the strategy (DDP ...), compile it if asked.

        What the Trainer uses; ``setup_module`` adds the ``RuntimeModule`` wrapper on top.

        :param module: the user's ``torch.nn.Module``.
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
        """``optimizer`` as the strategy needs it (wrapped where it shards optimizer state), without a wrapper.

        :param optimizer: a torch optimizer over the set-up module's parameters.
        """
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

        :param module: the ``torch.nn.Module`` to set up.
        :param optimizers: optimizers over its parameters, set up with it.
        :param scheduler: an LR scheduler, handed back as it is; ``None`` (the default): none.
        :param move_to_device: as in ``setup_module``.
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

        :param module: the ``torch.nn.Module`` to set up (not one set up already).
        :param move_to_device: ``True`` (the default): converted for the precision, placed or wrapped for the
            strategy and compiled if asked; ``False``: only converted (and wrapped on several processes).
        :param float_outputs: what forward computed in float16/bfloat16 under autocast comes back in float32, as
            Accelerate's prepared models return it; default ``False``.
        :raises MisconfigurationError: where ``module`` was set up already.
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

        :param dataloaders: one or more DataLoaders (or other iterables of batches).
        :param use_distributed_sampler: ``True`` (the default): shard them over the ranks where there are
            several; ``False``: every rank iterates the whole loader.
        :param move_to_device: ``True`` (the default): each batch arrives on the device; ``False``: as loaded.
        :param even_batches: see above; default ``True``.
        :raises TypeError: where no loader is given.
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
        shuffled orders shared by the ranks start from, decided by ``seed_everything``.

        :param generator: the ``torch.Generator`` to draw from; ``None`` (the default): torch's global one.
        """
        return self.broadcast(int(torch.randint(0, 2**31, (), generator=generator)))

    def to_device(self, batch: Any) -> Any:
        """``batch`` (tensors in any nesting, or a module) on this runtime's device, inputs cast for the precision.

        :param batch: tensors in lists, tuples, dicts (at any depth), or a ``torch.nn.Module``.
        """
        if isinstance(batch, nn.Module):
            return batch.to(self.device)
        return self.precision.convert_input(move_to_device(batch, self.device))

    @staticmethod
    def seed_everything(seed: int | None = None, workers: bool | None = None, verbose: bool = True) -> int:
        """Seed Python, NumPy and torch (see ``framework.seed_everything``); returns the seed.

        :param seed: an int; ``None`` (the default): ``PL_GLOBAL_SEED`` from the environment, else 0.
        :param workers: ``True`` gives DataLoader workers distinct derived seeds; ``None`` (the default) means no.
        :param verbose: log the seed (default ``True``).
        """
        return seed_everything(seed, workers=bool(workers), verbose=verbose)

    def teardown(self) -> None:
        """Undo ``setup_environment`` (end the process group, where there is one); the checkpoint IO plugin's
        ``teardown`` after."""
        self.strategy.teardown()
        self.strategy.checkpoint_io.teardown()

    def __repr__(self) -> str:
        return f"Runtime(device={self.device}, strategy={self.strategy!r}, precision={self.precision!r})"


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
