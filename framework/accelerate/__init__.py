"""Hugging Face Accelerate's way of writing a training loop, on the framework's Runtime.

A loop written for Accelerate runs after ``from accelerate import Accelerator`` becomes
``from framework.accelerate import Accelerator`` (and ``accelerate.utils`` becomes
``framework.accelerate.utils``), launched with ``framework launch`` and Accelerate's flags or
config file, or with torchrun. Not imported by ``import framework``.
"""

from framework.accelerate.accelerator import Accelerator, skip_first_batches
from framework.accelerate.utils import DistributedType

__all__ = ["Accelerator", "DistributedType", "skip_first_batches"]
