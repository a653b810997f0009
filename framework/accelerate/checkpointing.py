"""``save_state`` / ``load_state``: everything a loop needs to continue exactly, in a folder laid out as
Accelerate's (``model.safetensors``, ``optimizer.bin``, ``scheduler.bin``, ``random_states_<rank>.pkl`` ...),
every file loadable with ``torch.load(weights_only=True)`` or safetensors.

The folder is written elsewhere and renamed into place once complete, with a commit marker, so a save killed at any
instant leaves the states saved before it whole, and ``load_state()`` never picks a partial one
(``state_folders`` has the protocol).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from framework.accelerate import deepspeed, state_folders
from framework.accelerate.weights import read_weights, weights_file, write_weights
from framework.errors import MisconfigurationError
from framework.io.checkpoint_storage import load_checkpoint, save_checkpoint
from framework.runtime.wrappers import forward_module, original_optimizer
from framework.seed import restore_rng_states, rng_states


def save_state(accelerator: Any, output_dir: str | os.PathLike | None, safe_serialization: bool,
               pre_hooks: list[Callable[..., None]]) -> str:
    """Write the prepared objects' states, the registered objects', every rank's random state, the dataloaders'
    positions and the accumulation count to ``output_dir`` (or the next automatically named folder), after
    ``pre_hooks(models, weights, folder)`` had their say on the weights. ``folder`` is the one being written,
    renamed to its name once complete: files a hook writes there become part of the state."""
    target = _output_dir(accelerator, output_dir)
    partial = state_folders.staging_folder(target, accelerator.project_configuration.automatic_checkpoint_naming)
    runtime, main = accelerator._runtime, accelerator.is_main_process
    if main:
        state_folders.begin_save(target, partial)
    runtime.barrier("save_state")
    strategy = runtime.strategy
    on_engine = _on_engine(accelerator)  # DeepSpeed's engine writes the weights and optimizer state itself
    if on_engine:
        deepspeed.save_engine(accelerator, partial)
    if _sharded(strategy):
        for index, model in enumerate(accelerator._models):
            runtime.save(os.path.join(partial, _numbered("pytorch_model_fsdp", index, "", always=True)),
                         {"model": model})
    weights = [] if _sharded(strategy) or on_engine else [strategy.module_state_dict(forward_module(model))
                                                          for model in accelerator._models]
    for hook in pre_hooks:
        hook(accelerator._models, weights, partial)
    for index, state in enumerate(weights if main else []):
        write_weights(state, os.path.join(partial, weights_file(index, safe_serialization)))
    for index, optimizer in enumerate([] if on_engine else accelerator._optimizers):
        name = _numbered("optimizer", index, "", always=True) if _sharded(strategy) else _numbered("optimizer", index)
        runtime.save(os.path.join(partial, name), {"optimizer": original_optimizer(optimizer)})
    _on_main(main, partial, "scheduler", [scheduler.state_dict() for scheduler in accelerator._schedulers])
    _on_main(main, partial, "dl_state_dict", [loader.state_dict() for loader in accelerator._dataloaders])
    _on_main(main, partial, "custom_checkpoint", [item.state_dict() for item in accelerator._custom_objects], ".pkl")
    if accelerator.mixed_precision == "fp16" and main:
        save_checkpoint(runtime.precision.state_dict(), os.path.join(partial, "scaler.pt"))
    save_checkpoint({"rng": rng_states(), "step": accelerator.step,
                     "dataloaders": [loader.rank_state() for loader in accelerator._dataloaders]},
                    os.path.join(partial, f"random_states_{accelerator.process_index}.pkl"))
    runtime.barrier("save_state")
    if main:  # every process has written its files: commit, then drop what total_limit no longer keeps
        state_folders.commit(partial, target)
        config = accelerator.project_configuration
        if config.automatic_checkpoint_naming and config.total_limit:
            state_folders.drop_old_states(config.project_dir, config.total_limit)
        state_folders.end_save(partial)
    runtime.barrier("save_state")
    if accelerator.project_configuration.automatic_checkpoint_naming:
        accelerator.project_configuration.iteration += 1
    return target


def load_state(accelerator: Any, input_dir: str | os.PathLike | None, strict: bool,
               pre_hooks: list[Callable[..., None]]) -> None:
    """Put back what ``save_state`` wrote into the prepared and registered objects, in the order they were
    prepared; each rank takes its own random state. ``pre_hooks(models, input_dir)`` run first; the models they
    remove from the list are not loaded. Without ``input_dir`` (automatic naming) it loads the newest complete
    state, and the next ``save_state`` takes the number after it."""
    source = _input_dir(accelerator, input_dir)
    runtime, strategy = accelerator._runtime, accelerator._runtime.strategy
    models = list(accelerator._models)
    for hook in pre_hooks:
        hook(models, source)
    if _on_engine(accelerator):
        if models:
            deepspeed.load_engine(accelerator, source, strict)
        models = []
    for index, model in enumerate(models):
        sharded = os.path.join(source, _numbered("pytorch_model_fsdp", index, "", always=True))
        if os.path.isdir(sharded):
            runtime.load(sharded, {"model": model}, strict=strict)
        else:
            strategy.load_module_state(forward_module(model), read_weights(source, index), strict=strict)
    for index, optimizer in enumerate([] if _on_engine(accelerator) else accelerator._optimizers):
        path = os.path.join(source, _numbered("optimizer", index, "", always=True))
        runtime.load(path if os.path.isdir(path) else os.path.join(source, _numbered("optimizer", index)),
                     {"optimizer": original_optimizer(optimizer)})
    _restore(source, "scheduler", accelerator._schedulers)
    _restore(source, "dl_state_dict", accelerator._dataloaders)
    _restore(source, "custom_checkpoint", accelerator._custom_objects, ".pkl")
    scaler = os.path.join(source, "scaler.pt")
    if accelerator.mixed_precision == "fp16" and os.path.exists(scaler):
        runtime.precision.load_state_dict(load_checkpoint(scaler, map_location="cpu"))
    own = os.path.join(source, f"random_states_{accelerator.process_index}.pkl")
    saved = load_checkpoint(own if os.path.exists(own) else os.path.join(source, "random_states_0.pkl"))
    restore_rng_states(saved["rng"])
    accelerator.step = saved["step"]
    for loader, state in zip(accelerator._dataloaders, saved.get("dataloaders", []), strict=False):
        loader.load_rank_state(state)
    number = state_folders.state_number(source)
    if accelerator.project_configuration.automatic_checkpoint_naming and number is not None:
        accelerator.project_configuration.iteration = number + 1
    runtime.barrier("load_state")


def _output_dir(accelerator: Any, output_dir: str | os.PathLike | None) -> str:
    config = accelerator.project_configuration
    if not config.automatic_checkpoint_naming:
        if output_dir is None:
            raise MisconfigurationError(
                "save_state() needs output_dir=..., or Accelerator(project_config=ProjectConfiguration(project_dir="
                "..., automatic_checkpoint_naming=True)) to name the folders itself."
            )
        return os.path.normpath(os.path.expanduser(os.fspath(output_dir)))  # "state/" and "state": one folder
    folder = os.path.join(config.project_dir or ".", "checkpoints", f"checkpoint_{config.iteration}")
    if os.path.isdir(folder) and os.listdir(folder):
        raise MisconfigurationError(
            f"save_state(): the checkpoint folder {folder} exists already (save iteration {config.iteration}). Set "
            "accelerator.project_configuration.iteration to the next free number, or load_state() first, which "
            "continues the numbering."
        )
    return folder


def _input_dir(accelerator: Any, input_dir: str | os.PathLike | None) -> str:
    if input_dir is not None:
        found = state_folders.complete_state_at(os.path.expanduser(os.fspath(input_dir)))
        if found is None:
            raise FileNotFoundError(f"load_state({os.fspath(input_dir)!r}): no such folder.")
        return found
    config = accelerator.project_configuration
    if not config.automatic_checkpoint_naming:
        raise MisconfigurationError("load_state() needs input_dir=..., or Accelerator(project_config="
                                    "ProjectConfiguration(project_dir=..., automatic_checkpoint_naming=True)).")
    # The main process picks, so every process loads the same state even if their views of the folder differ.
    runtime = accelerator._runtime
    found = runtime.broadcast(state_folders.newest_complete_state(config.project_dir)
                              if accelerator.is_main_process else None)
    if found is None:
        parent = os.path.join(config.project_dir or ".", "checkpoints")
        incomplete = [os.path.basename(path) for _, path in state_folders.numbered_states(config.project_dir)]
        raise MisconfigurationError(
            f"load_state(): no complete saved state in {parent}" + (
                f" ({', '.join(incomplete)} lack {state_folders.COMMIT_FILE}, the marker save_state writes last: "
                "a save cut short; name one to load it anyway: load_state(folder))."
                if incomplete else ".")
        )
    return found


def _numbered(stem: str, index: int, suffix: str = ".bin", always: bool = False) -> str:
    """Accelerate's file names: ``optimizer.bin``, ``optimizer_1.bin`` ... (``always``: ``optimizer_0`` too)."""
    return f"{stem}_{index}{suffix}" if index or always else f"{stem}{suffix}"


def _on_main(main: bool, folder: str, stem: str, states: list[Any], suffix: str = ".bin") -> None:
    if not main:
        return
    for index, state in enumerate(states):
        save_checkpoint(state, os.path.join(folder, _numbered(stem, index, suffix, always=stem == "custom_checkpoint")))


def _restore(folder: str, stem: str, targets: list[Any], suffix: str = ".bin") -> None:
    for index, target in enumerate(targets):
        name = _numbered(stem, index, suffix, always=stem == "custom_checkpoint")
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            raise MisconfigurationError(f"load_state({folder!r}): {name} is missing; the state was saved with fewer "
                                        f"objects of this kind than are prepared (or registered) now.")
        target.load_state_dict(load_checkpoint(path, map_location="cpu"))


def _on_engine(accelerator: Any) -> bool:
    return accelerator.deepspeed_plugin is not None and accelerator._runtime.strategy.engine is not None


def _sharded(strategy: Any) -> bool:
    return getattr(strategy, "state_dict_type", None) == "sharded"
