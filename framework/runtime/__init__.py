"""The Runtime: device, Strategy and Precision, public on its own for hand-written loops."""

from framework.runtime.compile import CompileError
from framework.runtime.runtime import Runtime

__all__ = ["CompileError", "Runtime"]
