"""The exceptions the framework raises on bad input."""

import pickle


class MisconfigurationError(ValueError):
    """An argument, a hook's return value or a combination of settings cannot work.

    The message names the argument or hook, the value received and what is accepted.
    It subclasses ``ValueError`` so ``except ValueError`` catches it as well.
    """


class CheckpointError(RuntimeError):
    """A checkpoint file cannot be used: truncated or corrupted, or written by a newer framework.

    The message names the file and what to do instead.
    """


class UnsafeCheckpointError(CheckpointError, pickle.UnpicklingError):
    """A checkpoint holds pickled Python objects beyond tensors and plain data, so loading it could run code: it
    was not loaded.

    The message names the file and what it named; ``weights_only=False`` loads it, for files you trust. It is a
    ``pickle.UnpicklingError`` too, as ``torch.load(weights_only=True)`` raises.
    """


class MissingPackageError(ModuleNotFoundError, MisconfigurationError):
    """A feature that wraps an optional package was used without that package installed.

    The message names the feature and the command that installs the package.
    """


class NotProvidedError(NotImplementedError):
    """A Lightning name that framework does not provide was used (called, subclassed, an attribute read).

    Importing such a name works (``framework as-lightning``); the message names it and says where the mapped
    names are listed.
    """


def require_package(module: str, feature: str, extra: str | None = None) -> None:
    """Raise ``MissingPackageError`` unless ``module`` can be imported; ``extra`` is the framework's extra that
    installs it, named in the message.

    Example::

        require_package("mlflow", "MLFlowLogger", extra="mlflow")
    """
    import importlib.util
    import sys

    try:
        found = importlib.util.find_spec(module) is not None
    except ValueError:  # imported already without a spec (a stand-in module a test put in sys.modules)
        found = module in sys.modules
    if not found:
        command = f'pip install "framework[{extra}]"' if extra else f"pip install {module}"
        raise MissingPackageError(f"{feature} needs {module}, which is not installed: {command}.")


_OUT_OF_MEMORY_SIGNS = (" out of memory", "MPS backend out of memory", "CUDNN_STATUS_NOT_SUPPORTED",
                        "can't allocate memory", "DefaultCPUAllocator: not enough", "PT_DEVMEM Allocation failed")


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says the device (or the CPU allocator) ran out of memory, so a smaller batch may fit."""
    import torch

    if isinstance(error, torch.OutOfMemoryError):
        return True
    return isinstance(error, RuntimeError) and any(sign in str(error) for sign in _OUT_OF_MEMORY_SIGNS)


def describe(value: object) -> str:
    """A short ``repr`` of ``value`` with its type, for error messages."""
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} (type {type(value).__name__})"


def unloggable_value(name: str, value: object) -> MisconfigurationError:
    """The error for ``self.log(name, value)`` with a value that is not a number, a tensor or a Metric."""
    hint = " Log a dict's items with self.log_dict(...)." if isinstance(value, dict) else ""
    return MisconfigurationError(f"self.log({name!r}, value) got {describe(value)}; accepted: a Python number, a "
                                 f"one-element tensor or a torchmetrics Metric.{hint}")
