"""Lightning's ``utilities.migration``: ``pl_legacy_patch``, around loading a checkpoint an old Lightning wrote.

Lightning needs it to unpickle classes that old versions named and new ones lack. framework reads checkpoints
without unpickling classes (unless ``weights_only=False``), so there is nothing to patch: the block runs as it is.

Example::

    with pl_legacy_patch():
        checkpoint = _load("epoch=3.ckpt")
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["pl_legacy_patch"]


@contextlib.contextmanager
def pl_legacy_patch() -> Iterator[None]:
    """Run the block as it is (see the module)."""
    yield
