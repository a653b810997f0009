"""``LambdaCallback``: a callback made of plain functions, one per hook."""

from collections.abc import Callable
from typing import Any

from framework.callbacks.base import Callback
from framework.errors import MisconfigurationError
from framework.hooks import Hook

CALLBACK_HOOKS = frozenset(hook.value for hook in Hook if hook.for_callbacks) | {"state_dict", "load_state_dict"}


class LambdaCallback(Callback):
    """Each keyword names a hook and gives the function to run there, with the hook's arguments.

    :param hooks: ``hook_name=function``: any hook of :class:`~framework.callbacks.Callback`, or ``state_dict``
        and ``load_state_dict``; another name, or a value that is not callable, raises.
    :raises MisconfigurationError: where a keyword is not a callback hook's name, or its value is not callable.

    Example::

        LambdaCallback(on_train_epoch_end=lambda trainer, module: print(trainer.current_epoch))
    """

    def __init__(self, **hooks: Callable[..., Any]) -> None:
        unknown = sorted(set(hooks) - CALLBACK_HOOKS)
        if unknown:
            raise MisconfigurationError(
                f"LambdaCallback got {unknown}, which are not callback hooks. Hooks: {sorted(CALLBACK_HOOKS)}."
            )
        for name, function in hooks.items():
            if not callable(function):
                raise MisconfigurationError(f"LambdaCallback({name}=...) needs a callable; got {function!r}.")
            setattr(self, name, function)
