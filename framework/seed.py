"""``seed_everything``: one call seeds Python, NumPy and torch."""

from __future__ import annotations

import os
import random

import torch

from framework.errors import MisconfigurationError, describe

_MAX_SEED = 2**32 - 1


def seed_everything(seed: int | None = None, workers: bool = False) -> int:
    """Seed ``random``, NumPy (when installed) and torch (all devices); returns the seed used.

    With ``seed=None`` the ``PL_GLOBAL_SEED`` environment variable is used, else 0.
    ``workers=True`` sets ``PL_SEED_WORKERS=1`` so DataLoader workers get distinct derived seeds.

    Example::

        framework.seed_everything(42, workers=True)
    """
    if seed is None:
        seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= _MAX_SEED:
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
    return seed


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
