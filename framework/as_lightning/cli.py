"""What libraries import from Lightning's ``cli`` beside ``LightningCLI`` itself: the optimizer and scheduler
callable types and ``instantiate_class``. (The YAML command line is ``framework fit --config``.)

Example::

    def __init__(self, optimizer: OptimizerCallable = torch.optim.Adam):
        self.optimizer = optimizer
    ...
    instantiate_class((model.parameters(),), {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.1}})
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

from framework.errors import MisconfigurationError, describe
from framework.utilities.types import LRSchedulerTypeUnion

__all__ = ["LRSchedulerCallable", "LRSchedulerTypeUnion", "OptimizerCallable", "ReduceLROnPlateau",
           "instantiate_class"]

#: What builds an optimizer from the parameters (``torch.optim.Adam``, ``functools.partial(SGD, lr=0.1)``).
OptimizerCallable = Callable[[Iterable], Optimizer]
#: What builds a scheduler from an optimizer.
LRSchedulerCallable = Callable[[Optimizer], LRScheduler | ReduceLROnPlateau]


def instantiate_class(args: Any, init: dict[str, Any]) -> Any:
    """Build ``init["class_path"]`` with ``args`` (a tuple of positional arguments, or one) and
    ``init["init_args"]``, as Lightning's CLI does."""
    if not isinstance(init, dict) or "class_path" not in init:
        raise MisconfigurationError(f"instantiate_class(init={describe(init)}): accepted a dict with 'class_path' "
                                    "and optionally 'init_args'.")
    module_name, _, class_name = init["class_path"].rpartition(".")
    cls = getattr(importlib.import_module(module_name), class_name)
    positional = args if isinstance(args, tuple) else (args,)
    return cls(*positional, **init.get("init_args", {}))


