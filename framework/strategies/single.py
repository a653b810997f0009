"""One process on one device."""

from typing import Any

import torch

from framework.errors import MisconfigurationError, describe
from framework.io.checkpoint_io import CheckpointIO
from framework.strategies.base import Strategy


class SingleDeviceStrategy(Strategy):
    """Runs the module on one device; collectives are identities.

    :param device: the device to run on (``"cuda:1"``), as in Lightning; its type must be the Trainer's
        accelerator. ``None`` (default): the one the Trainer's ``accelerator`` and ``devices`` choose.
    :param accelerator: only ``None``: the Trainer's ``accelerator=`` chooses.
    :param checkpoint_io: what saves, loads and removes checkpoint files (``framework.plugins``); ``None``
        (default): ``TorchCheckpointIO``. ``Trainer(plugins=[...])`` replaces it.
    :param precision_plugin: only ``None``: the Trainer's ``precision=`` or ``plugins=`` chooses.
    :raises MisconfigurationError: where ``accelerator`` or ``precision_plugin`` is given, or ``checkpoint_io`` is not
        a ``CheckpointIO``.

    Example::

        Trainer(strategy="single", accelerator="cpu")
    """

    name = "single"

    def __init__(self, device: torch.device | str | int | None = None, accelerator: Any = None,
                 checkpoint_io: CheckpointIO | None = None, precision_plugin: Any = None) -> None:
        super().__init__(checkpoint_io)
        for name, value in (("accelerator", accelerator), ("precision_plugin", precision_plugin)):
            if value is not None:
                raise MisconfigurationError(f"SingleDeviceStrategy({name}={describe(value)}): give it to the Trainer "
                                            f"({'accelerator=' if name == 'accelerator' else 'precision= or plugins='})"
                                            " instead; here accepted is None.")
        #: The device asked for, or None.
        self.requested_device = torch.device(device) if device is not None else None
