"""The Accelerator on DeepSpeed's engine (``DeepSpeedPlugin``, or ``framework launch --use_deepspeed``), as
Accelerate runs it: ``prepare`` fills the config's ``"auto"`` values (batch size from the dataloader, clipping 1.0,
bucket sizes from a Transformers model's ``hidden_size``, the Dummy optimizer's and schedule's numbers) and
starts the engine over the model and its optimizer; ``backward`` runs the engine's backward and, at the end of an
accumulation window, its step (clipping, the optimizer, the LR scheduler), so the prepared optimizer's and
scheduler's ``step()`` and ``zero_grad()`` do nothing.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch
from torch import nn

from framework.accelerate.deepspeed_wrappers import DeepSpeedOptimizerWrapper, DeepSpeedSchedulerWrapper
from framework.accelerate.utils.deepspeed import DeepSpeedPlugin, DummyOptim, DummyScheduler
from framework.accelerate.utils.environment import parse_flag_from_env
from framework.errors import MisconfigurationError
from framework.utilities.rank_zero import rank_zero_warn

USE_DEEPSPEED = "ACCELERATE_USE_DEEPSPEED"
_HIDDEN_SIZED = ("zero_optimization.reduce_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
                 "zero_optimization.stage3_param_persistence_threshold")
MODEL_TAG = "pytorch_model"  # the folder DeepSpeed's files go in, inside a save_state folder (Accelerate's name)


def plugin_asked(given: DeepSpeedPlugin | None) -> DeepSpeedPlugin | None:
    """The plugin given, else one from the launcher's settings where it asked for DeepSpeed, else None."""
    if given is not None:
        if not isinstance(given, DeepSpeedPlugin):
            raise MisconfigurationError(f"Accelerator(deepspeed_plugin={type(given).__name__}(...)): accepted a "
                                        "DeepSpeedPlugin from framework.accelerate.utils.")
        return given
    return DeepSpeedPlugin() if parse_flag_from_env(USE_DEEPSPEED) else None


def strategy(plugin: DeepSpeedPlugin, pg_kwargs: dict[str, Any]) -> Any:
    """``DeepSpeedStrategy`` over the plugin's config (the ``deepspeed`` extra)."""
    from framework.strategies.deepspeed import EXTRA_HINT, DeepSpeedStrategy, deepspeed_available

    if not deepspeed_available():
        raise MisconfigurationError(f"DeepSpeedPlugin needs DeepSpeed, which is not installed: {EXTRA_HINT}. "
                                    "Without it, fsdp_plugin= (or `framework launch --use_fsdp`) shards with FSDP2.")
    return DeepSpeedStrategy(config=plugin.deepspeed_config, **pg_kwargs)


def settle(plugin: DeepSpeedPlugin, asked: str, steps: int) -> tuple[str, int]:
    """The Accelerator's mixed precision and accumulation steps under ``plugin``, the config's ``"auto"`` values
    filled with them. Where ``"no"`` was asked (Accelerate's default, which the launcher sends), the
    ``fp16``/``bf16`` block the config enables decides, as in Accelerate; another precision must agree with it."""
    precision = asked if asked != "no" else plugin.config_mixed_precision() or "no"
    plugin.set_mixed_precision(precision)
    return precision, accumulation_steps(plugin, steps)


def accumulation_steps(plugin: DeepSpeedPlugin, steps: int) -> int:
    """Batches per optimizer step: the config's (or the plugin's) number where it gives one, filled with the
    Accelerator's where it says ``"auto"``; a number that differs from the Accelerator's is an error."""
    configured = plugin.deepspeed_config.get("gradient_accumulation_steps")
    if configured in (None, "auto"):
        plugin.deepspeed_config["gradient_accumulation_steps"] = steps
        return steps
    if steps != 1 and int(configured) != steps:
        raise MisconfigurationError(
            f"Accelerator(gradient_accumulation_steps={steps}) and the DeepSpeed config's gradient_accumulation_steps"
            f"={configured} disagree. Set it in one place (\"auto\" in the config takes the Accelerator's).")
    return int(configured)


# -- prepare ---
def fill_auto_values(accelerator: Any, args: tuple[Any, ...]) -> None:
    """Fill the config's ``"auto"`` values from what ``prepare`` was given, as Accelerate fills them."""
    plugin: DeepSpeedPlugin = accelerator.deepspeed_plugin
    values: dict[str, Any] = {"gradient_clipping": 1.0,
                              "zero_optimization.stage3_gather_16bit_weights_on_model_save": False}
    batch_size = _batch_size(args, plugin.is_train_batch_min)
    if batch_size is not None:
        steps = plugin.deepspeed_config["gradient_accumulation_steps"]
        values["train_micro_batch_size_per_gpu"] = batch_size
        values["train_batch_size"] = batch_size * steps * accelerator.num_processes
    model = next((obj for obj in args if isinstance(obj, nn.Module)), None)
    hidden = _hidden_size(model)
    if hidden is not None:
        values.update({"zero_optimization.reduce_bucket_size": hidden * hidden,
                       "zero_optimization.stage3_prefetch_bucket_size": int(0.9 * hidden * hidden),
                       "zero_optimization.stage3_param_persistence_threshold": 10 * hidden})
    elif model is not None and any(plugin.is_auto(key) for key in _HIDDEN_SIZED):
        unfilled = [key for key in _HIDDEN_SIZED if plugin.is_auto(key)]
        raise MisconfigurationError(
            f"The DeepSpeed config leaves {', '.join(unfilled)} as \"auto\", which is filled from a Transformers "
            f"model's config.hidden_size; {type(model).__name__} has none. Give integers for them.")
    optimizer = next((obj for obj in args if isinstance(obj, DummyOptim)), None)
    if optimizer is not None:
        values.update({"optimizer.params.lr": optimizer.lr, "optimizer.params.weight_decay": optimizer.weight_decay})
    scheduler = next((obj for obj in args if isinstance(obj, DummyScheduler)), None)
    if scheduler is not None and scheduler.lr_scheduler_callable is None:
        values.update({"scheduler.params.warmup_min_lr": 0, "scheduler.params.warmup_max_lr": _lr(scheduler.optimizer),
                       "scheduler.params.warmup_num_steps": scheduler.warmup_num_steps})
        if scheduler.total_num_steps is not None:
            values["scheduler.params.total_num_steps"] = math.ceil(scheduler.total_num_steps
                                                                   / accelerator.num_processes)
    plugin.deepspeed_config_process(must_match=False, **values)
    _check_optimizer_kinds(plugin, args)


def start_engine(accelerator: Any, optimizer: Any, scheduler: Any) -> tuple[Any, Any]:
    """Start the engine over the prepared model and ``optimizer`` (a torch optimizer or a ``DummyOptim``);
    returns the prepared optimizer, and the schedule the engine steps where ``scheduler`` is a
    ``DummyScheduler`` (else None: a torch scheduler is prepared as usual, and steps as Accelerate's do)."""
    plugin: DeepSpeedPlugin = accelerator.deepspeed_plugin
    unfilled = [key for key in ("train_micro_batch_size_per_gpu", "train_batch_size") if plugin.is_auto(key)]
    if unfilled:
        raise MisconfigurationError(
            "Under DeepSpeed, accelerator.prepare() needs a dataloader with an integer batch_size beside the model "
            f"and optimizer, to fill the config's \"auto\" {' and '.join(unfilled)}; or set an integer "
            "train_micro_batch_size_per_gpu in the DeepSpeed config.")
    strategy = accelerator._runtime.strategy
    strategy.config = plugin.deepspeed_config
    dummy = scheduler if isinstance(scheduler, DummyScheduler) else None
    schedule = dummy.lr_scheduler_callable if dummy is not None else None
    if isinstance(optimizer, DummyOptim):
        engine = strategy.start_engine(model_parameters=optimizer.params, lr_scheduler=schedule)
    else:
        engine = strategy.start_engine(optimizer, lr_scheduler=schedule)
    prepared_optimizer = DeepSpeedOptimizerWrapper(engine.optimizer, engine, accelerator)
    prepared_scheduler = None
    if dummy is not None and engine.lr_scheduler is not None:
        prepared_scheduler = DeepSpeedSchedulerWrapper(engine.lr_scheduler, [prepared_optimizer], accelerator)
    return prepared_optimizer, prepared_scheduler


def _batch_size(args: tuple[Any, ...], smallest: bool) -> int | None:
    """The dataloaders' batch size: the smallest (``is_train_batch_min``) or the largest."""
    sizes = []
    for obj in args:
        if isinstance(obj, nn.Module) or not hasattr(obj, "__iter__"):
            continue
        size = getattr(obj, "batch_size", None)
        if size is None:
            size = getattr(getattr(obj, "batch_sampler", None), "batch_size", None)
        if isinstance(size, int):
            sizes.append(size)
    return (min if smallest else max)(sizes) if sizes else None


def _hidden_size(model: nn.Module | None) -> int | None:
    config = getattr(model, "config", None)
    if config is None:
        return None
    hidden = getattr(config, "hidden_size", None)
    if hidden is None and getattr(config, "hidden_sizes", None):
        hidden = max(config.hidden_sizes)
    return hidden if isinstance(hidden, int) else None


def _lr(optimizer: Any) -> float | None:
    defaults = getattr(optimizer, "defaults", None)
    return defaults["lr"] if defaults is not None else getattr(optimizer, "lr", None)


def _check_optimizer_kinds(plugin: DeepSpeedPlugin, args: tuple[Any, ...]) -> None:
    """A Dummy object where the config names none, or a real one where it does, is an error (as in Accelerate)."""
    for block, dummy, real in (("optimizer", DummyOptim, torch.optim.Optimizer),
                               ("scheduler", DummyScheduler, (torch.optim.lr_scheduler.LRScheduler,))):
        in_config = block in plugin.deepspeed_config
        given_dummy = any(isinstance(obj, dummy) for obj in args)
        if given_dummy and not in_config and not (block == "scheduler" and _callable_schedule(args)):
            raise MisconfigurationError(f"{dummy.__name__} stands for the DeepSpeed config's {block!r} block, and the "
                                        f"config has none: add one, or pass a torch {block}.")
        if in_config and any(isinstance(obj, real) for obj in args):
            raise MisconfigurationError(f"The DeepSpeed config names an {block} (its {block!r} block), and a torch "
                                        f"{block} was given too: pass {dummy.__name__}(...) instead, or remove the "
                                        "block.")


def _callable_schedule(args: tuple[Any, ...]) -> bool:
    return any(isinstance(obj, DummyScheduler) and obj.lr_scheduler_callable is not None for obj in args)


# -- the step ---
def backward(accelerator: Any, loss: torch.Tensor, **kwargs: Any) -> None:
    """The engine's backward (the loss divided for accumulation once), then, where the window ends, its step."""
    engine = accelerator._runtime.strategy.engine
    if engine is None:
        raise MisconfigurationError("accelerator.backward() under DeepSpeed needs a prepared model and optimizer: "
                                    "accelerator.prepare(model, optimizer, dataloader).")
    engine.set_gradient_accumulation_boundary(accelerator.sync_gradients)
    steps = accelerator.gradient_state.num_steps
    engine.backward(loss / steps if steps > 1 else loss, scale_wrt_gas=False, **kwargs)
    if accelerator.sync_gradients:
        engine.step()
    engine.set_gradient_accumulation_boundary(True)


def clipped_norm(accelerator: Any, max_norm: float, norm_type: float) -> float | None:
    """The gradient norm the engine's last step saw (it clips to the config's ``gradient_clipping``); a
    ``max_norm`` other than that one is said once."""
    engine = accelerator._runtime.strategy.engine
    configured = float(engine.gradient_clipping() or 0.0)
    if (float(max_norm) != configured or norm_type != 2.0) and not _told.get("clipping"):
        _told["clipping"] = True
        rank_zero_warn(f"accelerator.clip_grad_norm_(max_norm={max_norm}, norm_type={norm_type}) under DeepSpeed: its "
                       f"engine clips inside its step, by the 2-norm, to the config's gradient_clipping "
                       f"({configured}). Set gradient_clipping (DeepSpeedPlugin, or the config) to clip otherwise.",
                       stacklevel=3)
    norm = engine.get_global_grad_norm()
    return None if norm is None else float(norm)


_told: dict[str, bool] = {}


# -- files ---
def save_engine(accelerator: Any, folder: str) -> None:
    """The engine's files (weights, ZeRO optimizer state) into ``folder``/``pytorch_model``; every rank writes."""
    engine = accelerator._runtime.strategy.engine
    engine.save_checkpoint(folder, tag=MODEL_TAG, client_state={})


def load_engine(accelerator: Any, folder: str, strict: bool) -> None:
    """The engine's files from ``folder``, checked first: only tensors, plain data and DeepSpeed's own classes."""
    from framework.strategies.deepspeed_checkpoint import check_files

    if not os.path.isdir(os.path.join(folder, MODEL_TAG)):
        raise MisconfigurationError(f"load_state({folder!r}): {MODEL_TAG}/ (DeepSpeed's files) is missing; the state "
                                    "was not saved under DeepSpeed.")
    check_files(folder)
    loaded, _ = accelerator._runtime.strategy.engine.load_checkpoint(
        folder, tag=MODEL_TAG, load_module_strict=strict, load_optimizer_states=True, load_lr_scheduler_states=False)
    if loaded is None:
        raise MisconfigurationError(f"load_state({folder!r}): DeepSpeed could not read {MODEL_TAG}/.")
