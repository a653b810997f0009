"""The callback that writes a command-line run's resolved config into its log directory."""

from __future__ import annotations

import posixpath

from framework.callbacks.base import Callback
from framework.cli.errors import ConfigError
from framework.io import fs


class SaveConfig(Callback):
    """Write ``text`` to ``<trainer.log_dir>/config.yaml`` (rank 0) when the run sets up.

    ``framework fit --config <that file>`` runs the same thing again. An existing ``config.yaml`` belongs
    to an earlier run and is not replaced unless ``overwrite=True``; every rank refuses together.
    """

    def __init__(self, text: str, overwrite: bool = False) -> None:
        self.text = text
        self.overwrite = overwrite

    def setup(self, trainer, pl_module, stage: str) -> None:
        directory = trainer.log_dir
        if directory is None:  # a logger of the user's that keeps nothing on disk: no folder to put it in
            return
        path = posixpath.join(str(directory), "config.yaml")
        taken = trainer.is_global_zero and not self.overwrite and fs.exists(path)
        if trainer.world_size > 1:
            taken = trainer.runtime.broadcast(taken)
        if taken:
            raise ConfigError(f"{path} already exists: it holds the config of an earlier run, which this run would "
                              f"replace. Delete it, or log this run elsewhere: --trainer.default_root_dir=DIR, or a "
                              f"logger (a new version folder per run). A script can pass overwrite_config=True to "
                              f"framework.cli.run.")
        if trainer.is_global_zero:
            fs.make_dirs(str(directory))
            fs.write_bytes_atomic(path, self.text.encode())
