"""The framework's version, kept apart so that any layer (the checkpoint format records it) can read it."""

__version__ = "0.1.0"
