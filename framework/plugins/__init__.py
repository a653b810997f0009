"""Where Lightning scripts import their Trainer plugins from (``lightning.pytorch.plugins``): the one the Trainer
takes is ``AsyncCheckpointIO``; precision and strategy choices are ``precision=`` and ``strategy=`` here.

Example::

    from framework.plugins import AsyncCheckpointIO        # was: from lightning.pytorch.plugins import ...
    Trainer(plugins=[AsyncCheckpointIO()])
"""

from framework.io.async_writer import AsyncCheckpointIO

__all__ = ["AsyncCheckpointIO"]
