"""The ``Accelerator``'s files: whole weights (``save_model``), any object (``save``), and the whole state of a
loop (``save_state``/``load_state``, with objects registered for it and hooks run before)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from framework.accelerate import checkpointing
from framework.accelerate.utils.operations import save
from framework.accelerate.weights import save_sharded_weights
from framework.errors import describe
from framework.runtime.wrappers import forward_module


class FileMethods:
    """The part of ``Accelerator`` that writes and reads files; it needs ``self._runtime``, ``self._models``,
    ``self._custom_objects``, ``self.is_main_process`` and ``self.wait_for_everyone``."""

    _runtime: Any
    _models: list[Any]
    _custom_objects: list[Any]
    _save_state_pre_hooks: dict[int, Callable[..., None]]
    _load_state_pre_hooks: dict[int, Callable[..., None]]
    is_main_process: bool
    wait_for_everyone: Callable[[], None]

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Have ``save_state``/``load_state`` keep these objects too (anything with ``state_dict`` and
        ``load_state_dict``).

        :param objects: objects with ``state_dict()`` and ``load_state_dict()`` (anything else raises
            ``TypeError``); saved as ``custom_checkpoint_<i>.pkl`` in the order registered, the main process's copy.
        :raises TypeError: where an object lacks a callable ``state_dict`` or ``load_state_dict``.
        """
        for obj in objects:
            if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))):
                raise TypeError(f"register_for_checkpointing({describe(obj)}): an object needs state_dict() and "
                                "load_state_dict() to be saved and restored.")
        self._custom_objects.extend(objects)

    def register_save_state_pre_hook(self, hook: Callable[[list[nn.Module], list[dict], str], None]
                                     ) -> RemovableHandle:
        """Call ``hook(models, weights, output_dir)`` in ``save_state`` before the weights are written: it may
        change ``weights`` (one state dict per prepared model; empty when sharded models save themselves), or
        remove entries to leave those weights out. ``output_dir`` is the folder being written, renamed to its name
        once complete: files the hook writes there are part of the state. ``handle.remove()`` unregisters it.

        :param hook: a callable taking ``(models, weights, output_dir)``, called on every process; what it
            returns is ignored. Hooks run in the order registered.
        """
        return _register(self._save_state_pre_hooks, hook)

    def register_load_state_pre_hook(self, hook: Callable[[list[nn.Module], str], None]) -> RemovableHandle:
        """Call ``hook(models, input_dir)`` in ``load_state`` before the weights are read: models it removes from
        ``models`` are not loaded. ``handle.remove()`` unregisters it.

        :param hook: a callable taking ``(models, input_dir)``, called on every process; what it returns is
            ignored. Hooks run in the order registered.
        """
        return _register(self._load_state_pre_hooks, hook)

    def get_state_dict(self, model: nn.Module, unwrap: bool = True) -> dict[str, torch.Tensor]:
        """``model``'s whole state dict (every process calls: FSDP gathers the shards).

        :param model: a prepared model (or any module).
        :param unwrap: accepted for Accelerate's sake; not used: the keys are always those of the module given to
            ``prepare`` (Accelerate's ``unwrap=False`` under DDP gives the wrapper's, prefixed ``module.``).
        """
        return self._runtime.strategy.full_module_state_dict(forward_module(model))

    def save(self, obj: Any, f: str | os.PathLike, safe_serialization: bool = False) -> None:
        """``torch.save(obj, f)`` on the main process only, written atomically (a dict of tensors as safetensors
        with ``safe_serialization``); ``ProjectConfiguration.save_on_each_node`` is not read. Every process calls
        it: a barrier follows.

        :param obj: what to save: anything ``torch.save`` takes, a dict of tensors with ``safe_serialization``.
        :param f: the file's path; missing folders are created.
        :param safe_serialization: ``True`` writes safetensors (needs the package), whatever the file's name;
            default ``False``: ``torch.save``'s format.
        """
        save(obj, f, safe_serialization=safe_serialization)
        self.wait_for_everyone()

    def save_model(self, model: nn.Module, save_directory: str | os.PathLike, max_shard_size: int | str = "10GB",
                   safe_serialization: bool = True) -> None:
        """``model``'s whole weights in ``save_directory`` (``model.safetensors``, or ``pytorch_model.bin`` without
        safetensors; numbered shards with an index past ``max_shard_size``). Every process calls it.

        :param model: a prepared model (or any module); its weights are saved whole, as ``get_state_dict`` gives them.
        :param save_directory: the folder, created if missing; weights files of the format written that are there
            already (a single file, shards, their index) are removed first.
        :param max_shard_size: the largest shard in bytes: an int, or a string such as ``"10GB"`` or ``"500MiB"``
            (GB: 10**9 bytes, GiB: 2**30); default ``"10GB"``. A tensor larger than that gets a shard alone.
        :param safe_serialization: ``True`` (the default): safetensors files (``pytorch_model.bin`` with a warning
            where safetensors is not installed); ``False``: ``torch.save``'s format.
        """
        state = self.get_state_dict(model)
        if self.is_main_process:
            save_sharded_weights(state, os.fspath(save_directory), max_shard_size, safe_serialization)
        self.wait_for_everyone()

    def save_state(self, output_dir: str | os.PathLike | None = None, safe_serialization: bool = True,
                   **save_model_func_kwargs: Any) -> str:
        """Save everything a loop needs to continue exactly: the prepared models, optimizers, schedulers and
        dataloaders' positions, the fp16 scaler, every process's random state and the registered objects.
        Returns the folder. Under automatic naming: ``<project_dir>/checkpoints/checkpoint_<i>``, the oldest past
        ``total_limit`` dropped. The folder appears only once complete (with ``state_complete.json``, written
        last): a save killed at any instant leaves the states saved before it whole.

        :param output_dir: the folder to write; one there already is replaced once the new state is complete.
            Ignored under automatic naming; otherwise required (``None``, the default, is refused).
        :param safe_serialization: ``True`` (the default): the weights as ``model.safetensors``
            (``pytorch_model.bin`` where safetensors is not installed); ``False``: ``pytorch_model.bin``. Not used
            for FSDP's sharded state.
        :param save_model_func_kwargs: accepted for Accelerate's sake (DeepSpeed's arguments); not used.
        """
        return checkpointing.save_state(self, output_dir, safe_serialization, list(self._save_state_pre_hooks.values()))

    def load_state(self, input_dir: str | os.PathLike | None = None, strict: bool = True,
                   **load_model_func_kwargs: Any) -> None:
        """Restore what ``save_state`` saved into the prepared (and registered) objects: the next pass of a
        prepared dataloader continues where the saved one stood (the next pass, where it was saved at its last
        batch). Without ``input_dir`` under automatic naming: the newest complete state in
        ``<project_dir>/checkpoints``, and the next ``save_state`` takes the number after it.

        :param input_dir: a folder ``save_state`` wrote; ``None`` (the default): the newest complete state under
            automatic naming, refused without it.
        :param strict: ``True`` (the default): the saved weights' keys must match each model's exactly;
            ``False``: missing and unexpected keys are allowed. In Accelerate the second argument is ``load_kwargs``.
        :param load_model_func_kwargs: accepted for Accelerate's sake (``load_kwargs`` too); not used.
        """
        checkpointing.load_state(self, input_dir, strict, list(self._load_state_pre_hooks.values()))


def _register(hooks: dict[int, Callable[..., None]], hook: Callable[..., None]) -> RemovableHandle:
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle
