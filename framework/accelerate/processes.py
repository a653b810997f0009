"""The ``Accelerator``'s dealings with the ranks: which process this is, code run on some of them only, and the
collectives on nested data, under Accelerate's names."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from framework.accelerate import operations
from framework.accelerate.utils import DistributedType
from framework.runtime.data_split import contiguous_part


class ProcessControl:
    """The part of ``Accelerator`` that knows the processes; it needs ``self._runtime`` and ``self.gradient_state``."""

    _runtime: Any
    gradient_state: Any

    # -- which process this is ---
    @property
    def device(self) -> torch.device:
        """The device this process computes on."""
        return self._runtime.device

    @property
    def num_processes(self) -> int:
        """How many processes take part, over all machines."""
        return self._runtime.world_size

    @property
    def process_index(self) -> int:
        """This process's index among all processes."""
        return self._runtime.global_rank

    @property
    def local_process_index(self) -> int:
        """This process's index on its machine."""
        return self._runtime.local_rank

    @property
    def is_main_process(self) -> bool:
        """Whether this is the first process of all."""
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        """Whether this is the first process of its machine."""
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        """Whether this is the last process of all."""
        return self.process_index == self.num_processes - 1

    @property
    def use_distributed(self) -> bool:
        """Whether several processes take part."""
        return self.num_processes > 1

    @property
    def distributed_type(self) -> DistributedType:
        """``DEEPSPEED`` on DeepSpeed's engine, ``FSDP`` when sharding with FSDP, ``NO`` for one process, else
        ``MULTI_GPU`` or ``MULTI_CPU``."""
        if self._runtime.strategy.name in ("fsdp", "deepspeed"):
            return DistributedType(self._runtime.strategy.name.upper())
        if self.num_processes == 1:
            return DistributedType.NO
        return DistributedType.MULTI_GPU if self.device.type == "cuda" else DistributedType.MULTI_CPU

    # -- running code on some processes ---
    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on each machine's first process only.

        :param args: what ``print`` takes, with its keyword arguments (``sep``, ``end``, ``file``, ``flush``).
        """
        if self.is_local_main_process:
            print(*args, **kwargs)

    def wait_for_everyone(self) -> None:
        """Wait until every process gets here (a barrier)."""
        self._runtime.barrier("wait_for_everyone")

    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        """Run the block on the main process first, then on the others (a download, a cache to build)."""
        with self._runtime.rank_zero_first():
            yield

    @contextlib.contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        """Run the block on each machine's first process first, then on the machine's others."""
        with self._runtime.rank_zero_first(local=True):
            yield

    def on_main_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """A decorator: ``function`` runs on the main process only (elsewhere the call returns None).

        :param function: the function to wrap.
        """
        return self._only_where(function, lambda: self.is_main_process)

    def on_local_main_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """A decorator: ``function`` runs on each machine's first process only (elsewhere the call returns None).

        :param function: the function to wrap.
        """
        return self._only_where(function, lambda: self.is_local_main_process)

    def on_last_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """A decorator: ``function`` runs on the last process only (elsewhere the call returns None).

        :param function: the function to wrap.
        """
        return self._only_where(function, lambda: self.is_last_process)

    def on_process(self, function: Callable[..., Any] | None = None, process_index: int | None = None) -> Any:
        """A decorator: ``function`` runs on process ``process_index`` only (on every process when there is one).

        :param function: the function to wrap; ``None`` (the default): a decorator taking it is returned, as in
            ``@accelerator.on_process(process_index=1)``.
        :param process_index: the global index of the process to run on; ``None`` (the default) matches none
            when several processes run.

        Example::

            @accelerator.on_process(process_index=1)
            def report(): ...
        """
        if function is None:
            return functools.partial(self.on_process, process_index=process_index)
        return self._only_where(function, lambda: not self.use_distributed or self.process_index == process_index)

    def on_local_process(self, function: Callable[..., Any] | None = None, local_process_index: int | None = None
                         ) -> Any:
        """A decorator: ``function`` runs on each machine's process ``local_process_index`` only (on every process
        when there is one).

        :param function: the function to wrap; ``None`` (the default): a decorator taking it is returned.
        :param local_process_index: the index on its machine of the process to run on; ``None`` (the default)
            matches none when several processes run.
        """
        if function is None:
            return functools.partial(self.on_local_process, local_process_index=local_process_index)
        return self._only_where(function, lambda: not self.use_distributed
                                or self.local_process_index == local_process_index)

    @staticmethod
    def _only_where(function: Callable[..., Any], here: Callable[[], bool]) -> Callable[..., Any]:
        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs) if here() else None

        return run

    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """This process's contiguous share of ``inputs`` (a list, tuple, tensor or a dict of them); with
        ``apply_padding`` every share is as long as the longest, padded with the last item.

        :param inputs: a list, tuple or tensor (split along its first dimension), or a dict of them, each value
            split alike; the first processes take one item more where the length does not divide evenly.
        :param apply_padding: ``True`` repeats the last item of ``inputs`` to make the shorter shares as long as
            the longest (drop those results after gathering); default ``False``.

        Example::

            with accelerator.split_between_processes(prompts) as mine:
                outputs = [generate(prompt) for prompt in mine]
        """
        yield _share(inputs, self.num_processes, self.process_index, apply_padding)

    # -- collectives ---
    def gather(self, tensor: Any) -> Any:
        """Each tensor in ``tensor`` (nested lists, tuples, dicts) from every process, joined along the first
        dimension; a 0-dim tensor becomes one of ``num_processes`` elements. One process: as it is.

        :param tensor: a tensor, or lists, tuples and dicts of them at any depth, each of one shape on every
            process (``pad_across_processes`` first where sizes differ); anything else in it raises ``TypeError``.
        """
        return operations.gather(self._runtime.strategy, tensor)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """``gather`` for evaluation: at the end of a prepared dataloader's pass, the samples repeated to give
        every process a full last batch are dropped, so a metric sees each sample once, in order. Inputs that are
        not tensors are gathered as objects.

        :param input_data: tensors (nested in lists, tuples and dicts; their first dimension may differ between
            processes) or any picklable objects.
        :param use_gather_object: ``True`` gathers as objects even when ``input_data`` is all tensors (on several
            processes: their lists joined into one, any other value counted as one item); default ``False``.
        """
        state = self.gradient_state
        return operations.gather_for_metrics(self._runtime.strategy, input_data, state.remainder,
                                             state.end_of_dataloader, use_gather_object)

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """Each tensor in ``tensor`` reduced over the processes (``"sum"``, ``"mean"``, ``"max"``, ``"min"``,
        ``"none"``), new tensors; ``scale`` is accepted for Accelerate's signature (it applies on TPUs only).

        :param tensor: a tensor, or lists, tuples and dicts of them at any depth; anything else raises ``TypeError``.
        :param reduction: ``"sum"`` (the default), ``"mean"``, ``"max"``, ``"min"``, or ``"none"`` (each process
            keeps a copy of its own). Accelerate 1.15 sums for ``"min"`` and ``"none"`` on several processes.
        :param scale: not used.
        """
        return operations.reduce(self._runtime.strategy, tensor, reduction)

    def pad_across_processes(self, tensor: Any, dim: int = 0, pad_index: Any = 0, pad_first: bool = False) -> Any:
        """Each tensor padded along ``dim`` to the largest size any process has there, so it can be gathered.
        Every process calls it; on one process the tensors come back as they are.

        :param tensor: a tensor, or lists, tuples and dicts of them at any depth.
        :param dim: the dimension to pad (default 0; negative counts from the end); a tensor without it is
            returned as it is.
        :param pad_index: the value the padding is filled with; default 0.
        :param pad_first: ``True`` puts the padding before the values; default ``False``: after them.
        """
        return operations.pad_across_processes(self._runtime.strategy, tensor, dim, pad_index, pad_first)

    def set_trigger(self) -> None:
        """Raise a flag on this process that ``check_trigger`` sees on every process (stopping early)."""
        self._trigger = True

    def check_trigger(self) -> bool:
        """Whether any process called ``set_trigger`` since the last check; every process must call it."""
        raised = torch.tensor(float(getattr(self, "_trigger", False)), device=self.device)
        self._trigger = False
        return bool(self._runtime.all_reduce(raised, reduce_op="sum").item() > 0)


def _share(inputs: Any, num_processes: int, index: int, apply_padding: bool) -> Any:
    if isinstance(inputs, dict):
        return {key: _share(value, num_processes, index, apply_padding) for key, value in inputs.items()}
    start, end = contiguous_part(len(inputs), num_processes, index)
    part = inputs[start:end]
    longest = -(-len(inputs) // num_processes)
    if not apply_padding or len(part) == longest or len(inputs) == 0:
        return part
    if isinstance(inputs, torch.Tensor):
        return torch.cat([part, inputs[-1:].expand(longest - len(part), *inputs.shape[1:])])
    return part + type(part)([inputs[-1]] * (longest - len(part)))
