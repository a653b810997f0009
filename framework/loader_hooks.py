"""The ``*_dataloader`` methods a Module and a DataModule may define, as Lightning's ``DataHooks``."""

from __future__ import annotations

from typing import Any

from framework.errors import MisconfigurationError


def _not_defined(name: str) -> MisconfigurationError:
    return MisconfigurationError(f"`{name}` must be implemented to be used with the Trainer: define {name}() "
                                 "returning a DataLoader (or pass the loaders to the Trainer's method).")


class LoaderHooks:
    """``train_dataloader``, ``val_dataloader``, ``test_dataloader`` and ``predict_dataloader``: the Trainer asks
    for the ones a subclass defines (or sets as an attribute) and passes over the others; called directly,
    an undefined one says so."""

    def train_dataloader(self) -> Any:
        """The training loader(s) ``fit`` uses when none are passed to it.

        :raises MisconfigurationError: where a subclass does not define it (nor set it as an attribute).
        """
        raise _not_defined("train_dataloader")

    def val_dataloader(self) -> Any:
        """The validation loader(s) for ``fit`` and ``validate``.

        :raises MisconfigurationError: where a subclass does not define it (nor set it as an attribute).
        """
        raise _not_defined("val_dataloader")

    def test_dataloader(self) -> Any:
        """The test loader(s) for ``test``.

        :raises MisconfigurationError: where a subclass does not define it (nor set it as an attribute).
        """
        raise _not_defined("test_dataloader")

    def predict_dataloader(self) -> Any:
        """The loader(s) for ``predict``.

        :raises MisconfigurationError: where a subclass does not define it (nor set it as an attribute).
        """
        raise _not_defined("predict_dataloader")
