"""The library's checkpoint plugin: Lightning's TorchCheckpointIO, writing a sidecar file of its own."""

import json
import os

from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning_fabric.utilities.types import _PATH


class SidecarCheckpointIO(TorchCheckpointIO):
    """Saves as Lightning does, and beside each checkpoint a small JSON the library's tools read."""

    saves = 0

    def save_checkpoint(self, checkpoint, path: _PATH, storage_options=None):
        super().save_checkpoint(checkpoint, path, storage_options)
        type(self).saves += 1
        with open(f"{path}.json", "w") as file:
            json.dump({"global_step": checkpoint["global_step"], "epoch": checkpoint["epoch"]}, file)

    def remove_checkpoint(self, path: _PATH) -> None:
        super().remove_checkpoint(path)
        if os.path.exists(f"{path}.json"):
            os.remove(f"{path}.json")
