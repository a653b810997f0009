"""Lightning's ``accelerators``: ``CPUAccelerator``, ``CUDAAccelerator``, ``MPSAccelerator`` with the class methods
libraries call (``is_available``, ``auto_device_count``), and ``find_usable_cuda_devices``.

``Trainer(accelerator=CUDAAccelerator())`` is ``Trainer(accelerator="cuda")``.

Example::

    if CUDAAccelerator.is_available():
        devices = find_usable_cuda_devices(2)
"""

from __future__ import annotations

from typing import Any

import torch

from framework.errors import MisconfigurationError

__all__ = ["Accelerator", "CPUAccelerator", "CUDAAccelerator", "MPSAccelerator", "find_usable_cuda_devices"]


class Accelerator:
    """A kind of device; the Trainer takes one by its ``accelerator_name``."""

    accelerator_name = "cpu"

    @staticmethod
    def is_available() -> bool:
        """Whether this machine has such a device."""
        return True

    @staticmethod
    def auto_device_count() -> int:
        """How many such devices ``devices="auto"`` would use."""
        return 1

    @staticmethod
    def parse_devices(devices: Any) -> Any:
        """``devices`` as given (framework reads them in the Trainer)."""
        return devices

    def setup_device(self, device: torch.device) -> None:
        """Nothing to set up here: the Runtime does it."""

    def teardown(self) -> None:
        """Nothing to release here."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class CPUAccelerator(Accelerator):
    """The CPU."""

    accelerator_name = "cpu"


class CUDAAccelerator(Accelerator):
    """NVIDIA GPUs through CUDA."""

    accelerator_name = "cuda"

    @staticmethod
    def is_available() -> bool:
        return torch.cuda.is_available()

    @staticmethod
    def auto_device_count() -> int:
        return torch.cuda.device_count()


class MPSAccelerator(Accelerator):
    """Apple GPUs through Metal."""

    accelerator_name = "mps"

    @staticmethod
    def is_available() -> bool:
        return torch.backends.mps.is_available()


def find_usable_cuda_devices(num_devices: int = -1) -> list[int]:
    """The indices of ``num_devices`` CUDA devices that take an allocation now (``-1``: all that do); a
    ``MisconfigurationError`` when fewer do (another job holds them in exclusive mode)."""
    usable = []
    for index in range(torch.cuda.device_count()):
        if num_devices != -1 and len(usable) == num_devices:
            break
        try:
            torch.tensor(0, device=torch.device("cuda", index))
        except RuntimeError:
            continue
        usable.append(index)
    if num_devices != -1 and len(usable) < num_devices:
        raise MisconfigurationError(
            f"find_usable_cuda_devices({num_devices}): only {len(usable)} of this machine's "
            f"{torch.cuda.device_count()} CUDA devices can be used now ({usable})."
        )
    return usable
