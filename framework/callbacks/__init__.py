"""Callbacks: objects whose hooks the Trainer calls around the Module's."""

from framework.callbacks.base import Callback

__all__ = ["Callback"]
