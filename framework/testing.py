"""Helpers for testing distributed code on CPU with real processes, and for counting what would wait for a GPU."""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import torch

from framework.runtime.start_method import choose_start_method
from framework.runtime.worker_processes import start_processes

__all__ = ["HOST_READS", "HostReads", "SavedActivations", "count_host_reads", "spawn", "state_bytes"]


def spawn(world_size: int, fn: Callable[..., Any], *args: Any, start_method: str = "auto",
          timeout: float = 60.0) -> list[Any]:
    """Run ``fn(rank, *args)`` on ``world_size`` real processes joined in a gloo process group; each rank's result.

    A rank that raises makes ``spawn`` raise the same exception (with the rank and its
    traceback) after stopping the others; a collective waiting longer than ``timeout``
    seconds fails instead of hanging the test. A Trainer or Runtime created inside ``fn``
    joins these ranks.

    The processes are forked where that is safe, and elsewhere (on a machine with GPUs) forked from a
    forkserver, or spawned where there is none (see ``framework.runtime.start_method``): define ``fn``,
    and the classes its arguments hold, at the top level of a module, so that such a process can
    import them.

    Example::

        def total(rank):      # at the top level of the test file
            value = torch.tensor([rank + 1.0])
            torch.distributed.all_reduce(value)
            return value.item()

        assert framework.testing.spawn(2, total) == [3.0, 3.0]
    """
    method = choose_start_method(start_method, script_available=False)
    return start_processes(_in_process_group, (fn, args, timeout), world_size, method)


def state_bytes(module: Any, optimizer: Any = None) -> dict[str, int]:
    """The bytes of training state this rank holds: ``parameters`` and ``gradients`` of ``module`` as it
    exposes them now, and ``optimizer`` (its state tensors); a DTensor counts its local part only.

    What the memory arithmetic of ZeRO is about: for Ψ fp32 parameters with Adam on N ranks,
    DDP holds 4Ψ + 4Ψ + 8Ψ, ZeRO-1 4Ψ + 4Ψ + 8Ψ/N, ZeRO-2 4Ψ + 4Ψ/N + 8Ψ/N (parameters
    whole between forward and backward), ZeRO-3 (4Ψ + 4Ψ + 8Ψ)/N. Parameters count as the module
    exposes them: while ZeRO-2 holds them gathered, FSDP also keeps this rank's part (4Ψ/N) aside,
    which is not counted.

    Example::

        class Measure(Callback):
            def on_after_backward(self, trainer, module):
                self.gradient_bytes = state_bytes(module)["gradients"]
    """
    parameters = list(module.parameters())
    held = {"parameters": sum(_local_bytes(p) for p in parameters),
            "gradients": sum(_local_bytes(p.grad) for p in parameters if p.grad is not None),
            "optimizer": 0}
    if optimizer is not None:
        inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer keeps this rank's state there
        held["optimizer"] = sum(_local_bytes(value) for entry in inner.state.values() for value in entry.values()
                                if isinstance(value, torch.Tensor))
    return held


class SavedActivations:
    """The bytes of activations autograd holds for backward in this block: ``current`` and ``peak``.

    What ``torch.cuda.max_memory_allocated`` would show of activation memory, counted the same
    way on any device: a tensor counts from when autograd saves it for backward, or activation
    checkpointing recomputes it in backward, until its memory is freed. Tensors sharing memory
    count once, with their whole storage; parameters (leaves gradients flow into, and views of
    them) do not count, nor do tensors a hook moved elsewhere (``save_on_cpu``) or gradients; a
    parameter's copy that autocast made and a linear layer saved does.
    Under checkpointing only each checkpointed block's inputs are held through forward, and
    backward recomputes one block at a time, so the peak is the inputs plus one block's
    activations. Counted on the thread that enters it (backward's nodes included). Inside it
    checkpointing recomputes whole blocks (``set_checkpoint_early_stop(False)``, which holds for
    every thread) so that each recomputed tensor is seen: the same results, a little more work.

    Example::

        with SavedActivations() as saved:
            model(x).sum().backward()
        print(f"{saved.peak / 1e6:.1f} MB")

    From a Callback: ``start()`` in ``on_train_batch_start``, ``stop()`` in ``on_train_batch_end``.
    """

    def __init__(self) -> None:
        self.current = 0
        self.peak = 0
        self._held: dict[int, weakref.finalize] = {}  # storage id -> what forgets it when it is freed
        self._parameters: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self._hooks = contextlib.ExitStack()

    def start(self) -> SavedActivations:
        """Begin counting (a fresh peak); ``stop()`` must follow on the same thread."""
        from torch.utils.checkpoint import set_checkpoint_early_stop

        self.current = self.peak = 0
        # The saved-tensors hook sees what autograd keeps outside checkpointed blocks, their inputs
        # included; what checkpointing recomputes in backward goes past it, and is seen on the nodes
        # the recomputation makes. Stopping early, a recomputation ends inside making its last node.
        self._hooks.enter_context(torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack))
        self._hooks.enter_context(torch.autograd.graph.node_creation_hook(self._on_node))
        self._hooks.enter_context(set_checkpoint_early_stop(False))
        return self

    def stop(self) -> None:
        """Stop counting; ``peak`` and ``current`` keep their values."""
        self._hooks.close()
        for forget in self._held.values():
            forget.detach()
        self._held.clear()

    def __enter__(self) -> SavedActivations:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @torch.compiler.disable  # counted as it runs, not traced into a compiled graph
    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        self._count(tensor)
        return tensor.detach()  # not the tensor itself: an output saved with its grad_fn would be a cycle

    def _on_node(self, node: Any) -> None:
        if type(node).__name__ == "AccumulateGrad":  # made (in forward) for each parameter a step uses
            if node.variable is not None:
                self._count(node.variable)
            return
        for name in _saved_names(type(node)):
            saved = getattr(node, name)
            for entry in saved if isinstance(saved, (list, tuple)) else [saved]:
                if entry is not None and entry.unpack_hook is not _unpack and isinstance(entry.data, torch.Tensor):
                    self._count(entry.data)

    def _count(self, tensor: torch.Tensor) -> None:
        with torch.no_grad():  # to_local() records no autograd node (none may be made in a node hook)
            local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        storage = local.untyped_storage()
        key = id(storage)
        if _is_parameter(tensor):
            self._parameters[key] = storage
        if key in self._parameters or key in self._held or storage.nbytes() == 0:
            return
        self._held[key] = weakref.finalize(storage, self._free, key, storage.nbytes())
        self.current += storage.nbytes()
        self.peak = max(self.peak, self.current)

    def _free(self, key: int, size: int) -> None:
        self._held.pop(key, None)
        self.current -= size


def _unpack(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def _is_parameter(tensor: torch.Tensor) -> bool:
    base = tensor._base
    if base is None:
        base = tensor
    return isinstance(base, torch.nn.Parameter) or (base.is_leaf and base.requires_grad)


_SAVED_NAMES: dict[type, tuple[str, ...]] = {}


def _saved_names(node_type: type) -> tuple[str, ...]:
    """The attributes through which an autograd node of this type shows what it saved, unpacked or not."""
    if node_type not in _SAVED_NAMES:
        _SAVED_NAMES[node_type] = tuple(name for name in dir(node_type) if name.startswith("_raw_saved_"))
    return _SAVED_NAMES[node_type]


def _local_bytes(tensor: Any) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def _in_process_group(fn: Callable[..., Any], args: tuple, timeout: float) -> Any:
    import torch.distributed as dist

    from framework.strategies.parallel import start_process_group

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    start_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout))
    result = fn(rank, *args)
    dist.barrier()
    dist.destroy_process_group()
    return result


#: The Tensor methods that hand a tensor's value to Python: on a GPU each waits for the device.
HOST_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


class HostReads:
    """How many tensor values were read on the host, by method, inside ``count_host_reads()``."""

    def __init__(self) -> None:
        self.by_method: dict[str, int] = dict.fromkeys(HOST_READS, 0)

    @property
    def total(self) -> int:
        """All reads, whatever the method."""
        return sum(self.by_method.values())


@contextlib.contextmanager
def count_host_reads() -> Iterator[HostReads]:
    """Count the calls of ``Tensor.item/tolist/cpu/numpy/__bool__/__float__/__int__/__index__`` in this block.

    On a GPU each such call waits until the device has computed the value (a host sync); on a
    CPU the calls are the same, so counting them in a CPU test tells how often a step would
    wait on a GPU. Compare against the same plain PyTorch loop: some reads are of host
    tensors (Adam's step counts) and cost nothing on either.

    Example::

        with framework.testing.count_host_reads() as reads:
            trainer.fit(model, loader)
        print(reads.total, reads.by_method["item"])
    """
    reads = HostReads()
    originals = {name: getattr(torch.Tensor, name) for name in HOST_READS}
    own = {name for name in HOST_READS if name in vars(torch.Tensor)}  # the others are inherited from C

    def counted(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def read(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            reads.by_method[name] += 1
            return original(self, *args, **kwargs)

        return read

    for name, original in originals.items():
        setattr(torch.Tensor, name, counted(name, original))
    try:
        yield reads
    finally:
        for name, original in originals.items():
            if name in own:
                setattr(torch.Tensor, name, original)
            else:
                delattr(torch.Tensor, name)
