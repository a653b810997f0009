"""Seeding, and making random generators equal on every process."""

from __future__ import annotations

from typing import Any

import torch

from framework.accelerate.utils.enums import RNGType
from framework.accelerate.utils.shared_state import current_runtime
from framework.errors import MisconfigurationError
from framework.seed import seed_everything


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed Python, NumPy and torch; ``device_specific`` adds the process index, so each process draws differently;
    ``deterministic`` makes torch use deterministic algorithms.

    Example::

        set_seed(42)
    """
    if device_specific:
        seed += current_runtime().global_rank
    seed_everything(seed, verbose=False)
    if deterministic:
        torch.use_deterministic_algorithms(True)


def synchronize_rng_state(rng_type: RNGType | str | None = None, generator: torch.Generator | None = None) -> None:
    """Give every process the main process's state of one generator: ``"torch"`` (torch's CPU generator),
    ``"cuda"``, or ``"generator"`` (``generator``).

    :raises MisconfigurationError: where ``rng_type`` is "generator" without a ``generator``, or an
        ``RNGType`` other than "torch", "cuda" and "generator".
    """
    kind = RNGType(rng_type) if rng_type is not None else RNGType.TORCH
    runtime = current_runtime()
    if kind == RNGType.TORCH:
        torch.set_rng_state(runtime.broadcast(torch.get_rng_state()))
    elif kind == RNGType.CUDA:
        if torch.cuda.is_initialized():
            torch.cuda.set_rng_state(runtime.broadcast(torch.cuda.get_rng_state()))
    elif kind == RNGType.GENERATOR:
        if generator is None:
            raise MisconfigurationError("synchronize_rng_state('generator') needs generator=...")
        generator.set_state(runtime.broadcast(generator.get_state()))
    else:
        raise MisconfigurationError(f"synchronize_rng_state({kind.value!r}): the framework runs on CPU and CUDA; "
                                    "accepted 'torch', 'cuda' and 'generator'.")


def synchronize_rng_states(rng_types: list[Any], generator: torch.Generator | None = None) -> None:
    """``synchronize_rng_state`` for each of ``rng_types``."""
    for rng_type in rng_types:
        synchronize_rng_state(RNGType(rng_type), generator=generator)
