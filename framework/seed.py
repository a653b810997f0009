"""``seed_everything``: one call seeds Python, NumPy and torch."""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator
from typing import Any

import torch

from framework import console
from framework.checks import is_int
from framework.errors import MisconfigurationError, describe

_MAX_SEED = 2**32 - 1


def seed_everything(seed: int | None = None, workers: bool = False, verbose: bool = True) -> int:
    """Seed ``random``, NumPy (when installed) and torch (all devices); returns the seed used.

    With ``seed=None`` the ``PL_GLOBAL_SEED`` environment variable is used, else 0.
    ``workers=True`` sets ``PL_SEED_WORKERS=1`` so DataLoader workers get distinct derived seeds.
    ``verbose`` logs the seed (logger ``"framework"``, level INFO).

    Example::

        framework.seed_everything(42, workers=True)

    :raises MisconfigurationError: where ``seed`` (or the ``PL_GLOBAL_SEED`` it defaults to) is not an int in
        [0, 2**32 - 1].
    """
    if seed is None:
        seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
    if not is_int(seed) or not 0 <= seed <= _MAX_SEED:
        raise MisconfigurationError(f"seed_everything(seed={describe(seed)}): accepted an int in [0, {_MAX_SEED}].")
    os.environ["PL_GLOBAL_SEED"] = str(seed)
    os.environ["PL_SEED_WORKERS"] = str(int(workers))
    random.seed(seed)
    try:
        import numpy
    except ImportError:
        pass
    else:
        numpy.random.seed(seed)
    torch.manual_seed(seed)
    if verbose:
        console.info(f"Seed set to {seed}")
    return seed


@contextlib.contextmanager
def isolated_rng() -> Iterator[None]:
    """Run a block without moving the global random generators (Python, NumPy, torch CPU and CUDA).

    Example::

        with isolated_rng():
            torch.rand(3)          # draws here ...
        torch.rand(1)              # ... leave this value as it would have been
    """
    saved = rng_states()
    try:
        yield
    finally:
        restore_rng_states(saved)


def _numpy_state() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy.random.get_state()


def rng_states() -> dict[str, Any]:
    """The global random generators' states as plain data and tensors (loadable with ``weights_only=True``).

    Example::

        saved = rng_states()
        torch.rand(3)
        restore_rng_states(saved)   # the next draws repeat
    """
    python_version, python_internal, python_gauss = random.getstate()
    states: dict[str, Any] = {
        "python": [python_version, list(python_internal), python_gauss],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    numpy_state = _numpy_state()
    if numpy_state is not None:
        kind, keys, position, has_gauss, cached_gaussian = numpy_state
        states["numpy"] = [kind, torch.from_numpy(keys.astype("int64")), int(position), int(has_gauss),
                           float(cached_gaussian)]
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    """Put the global random generators back in the states ``rng_states()`` returned."""
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    if "numpy" in states:
        import numpy

        kind, keys, position, has_gauss, cached_gaussian = states["numpy"]
        numpy.random.set_state((kind, keys.numpy().astype(numpy.uint32), position, has_gauss, cached_gaussian))


def seed_worker(worker_id: int) -> None:
    """A DataLoader ``worker_init_fn``: seeds ``random`` and NumPy from the worker's torch seed.

    torch already gives each worker its own seed (base seed + worker id, new each epoch); this
    passes it on so augmentations drawn with ``random`` or NumPy differ between workers too.
    """
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed)


@contextlib.contextmanager
def isolate_rng(include_cuda: bool = True) -> Iterator[None]:
    """Lightning's name for ``isolated_rng``: the block's draws leave the global generators as they were
    (``include_cuda=False`` leaves the CUDA generators out, for use in a process that must not touch CUDA)."""
    saved = rng_states()
    if not include_cuda:
        saved.pop("cuda", None)
    try:
        yield
    finally:
        restore_rng_states(saved)


def reset_seed() -> None:
    """Seed again with the seed ``seed_everything`` chose (from ``PL_GLOBAL_SEED``); nothing if it was not called.

    Lightning calls this in each rank it starts; framework's ranks get the generator states themselves.
    """
    seed = os.environ.get("PL_GLOBAL_SEED")
    if seed is not None:
        seed_everything(int(seed), workers=os.environ.get("PL_SEED_WORKERS") == "1", verbose=False)


def pl_worker_init_function(worker_id: int, rank: int | None = None) -> None:
    """Lightning's ``worker_init_fn`` name: seeds ``random`` and NumPy in a DataLoader worker from its torch seed
    (``seed_worker``); ``rank`` is accepted for Lightning's signature (torch's seed differs per rank already)."""
    seed_worker(worker_id)
