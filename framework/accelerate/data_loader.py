"""Accelerate's data-loading names (``accelerate.data_loader``): preparing a DataLoader without an
``Accelerator`` call, and the pieces a prepared loader is made of."""

import abc
import functools
from typing import Any

import torch
from torch.utils.data import DataLoader

from framework.accelerate.batch_shards import BatchSamplerShard, IterableDatasetShard
from framework.accelerate.data import PreparedDataLoader, prepared_loader, skip_first_batches
from framework.accelerate.gradient_state import GradientState
from framework.accelerate.utils.operations import send_to_device
from framework.accelerate.utils.shared_state import current_accelerator, current_runtime
from framework.accelerate.utils.unsupported import refused_class
from framework.errors import MisconfigurationError

__all__ = ["BatchSamplerShard", "DataLoaderDispatcher", "DataLoaderShard", "IterableDatasetShard",
           "prepare_data_loader", "skip_first_batches"]


def prepare_data_loader(dataloader: DataLoader, device: torch.device | None = None, num_processes: int | None = None,
                        process_index: int | None = None, split_batches: bool = False, put_on_device: bool = False,
                        rng_types: Any = None, dispatch_batches: bool | None = None, even_batches: bool = True,
                        slice_fn_for_dispatch: Any = None, use_seedable_sampler: bool = False,
                        data_seed: int | None = None, non_blocking: bool = False, use_stateful_dataloader: bool = False,
                        torch_device_mesh: Any = None) -> PreparedDataLoader:
    """``dataloader`` as ``accelerator.prepare`` makes it: batch ``i`` of a pass to process
    ``i mod num_processes`` (the run's processes when not given), on ``device`` with ``put_on_device``.

    Example::

        loader = prepare_data_loader(DataLoader(dataset, batch_size=16, shuffle=True), device, put_on_device=True)
    """
    if split_batches or dispatch_batches:
        raise MisconfigurationError("prepare_data_loader(split_batches=True or dispatch_batches=True) is not "
                                    "supported: each process loads its own whole batches.")
    runtime = current_runtime()
    accelerator = current_accelerator()
    state = accelerator.gradient_state if accelerator is not None else GradientState()
    if not put_on_device:
        place = _as_it_is
    elif device is None:
        place = runtime.to_device
    else:
        place = functools.partial(send_to_device, device=device, non_blocking=non_blocking)
    return prepared_loader(dataloader, runtime, state, num_processes if num_processes is not None else
                           runtime.world_size, process_index if process_index is not None else runtime.global_rank,
                           even_batches, place, seedable=use_seedable_sampler, data_seed=data_seed)


def _as_it_is(batch: Any) -> Any:
    return batch


class DataLoaderShard(abc.ABC):  # noqa: B024 - an ABC only so that prepared loaders count as instances
    """Accelerate's class of prepared DataLoaders: what ``prepare`` makes of one is a ``DataLoaderShard`` to
    ``isinstance``, and ``DataLoaderShard(dataset, device=..., **dataloader_arguments)`` builds a DataLoader of
    ``dataset`` prepared for this run's processes."""

    def __new__(cls, dataset: Any, device: torch.device | None = None, rng_types: Any = None,
                synchronized_generator: Any = None, skip_batches: int = 0, use_stateful_dataloader: bool = False,
                _drop_last: bool = False, _non_blocking: bool = False, torch_device_mesh: Any = None,
                iteration: int = 0, **kwargs: Any) -> Any:
        loader = prepare_data_loader(DataLoader(dataset, **kwargs), device=device, put_on_device=device is not None)
        loader.set_epoch(iteration)
        return skip_first_batches(loader, skip_batches) if skip_batches else loader


DataLoaderShard.register(PreparedDataLoader)
DataLoaderDispatcher = refused_class(
    "DataLoaderDispatcher", "the framework does not dispatch batches from the main process (dispatch_batches); "
    "each process loads its own batches")
