"""One process on one device."""

from framework.strategies.base import Strategy


class SingleDeviceStrategy(Strategy):
    """Runs the module on one device; collectives are identities.

    Example::

        Trainer(strategy="single", accelerator="cpu")
    """

    name = "single"
