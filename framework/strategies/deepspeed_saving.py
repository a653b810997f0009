"""How ``DeepSpeedStrategy`` saves and loads: DeepSpeed's checkpoint directories, read by its engine, with the run's
own state beside them (``framework.io.deepspeed_dir``); a one-file checkpoint loads as whole weights."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from torch import nn
from torch.optim import Optimizer

from framework.errors import CheckpointError, MisconfigurationError, describe


class DeepSpeedWeights(dict):
    """What a loaded DeepSpeed checkpoint holds under ``"state_dict"``: nothing yet. The engine reads the weights
    (and the optimizer state) from ``path`` once it exists; a hook reading ``checkpoint["state_dict"]`` sees an
    empty dict."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path


class DeepSpeedSaving:
    """The checkpoint methods of ``DeepSpeedStrategy`` (which holds the engine, the router and the ZeRO stage)."""

    engine: Any
    zero_stage: int
    exclude_frozen_parameters: bool
    _trains: bool
    _router: Any
    _pending: tuple[str, bool] | None

    @property
    def saves_on_one_rank(self) -> bool:
        """False: every rank writes its part of DeepSpeed's files."""
        return False

    #: DeepSpeed writes its checkpoint files itself (``checkpoint_io`` is not used for them).
    writes_own_checkpoints = True

    def module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        """The user's module's state (empty under ZeRO-3, where each rank holds only its parts: DeepSpeed's own
        files hold the weights)."""
        return {} if self.zero_stage == 3 else self.unwrap(module).state_dict()

    def full_module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        """Every weight whole, on every rank (ZeRO-3 gathers them; every rank calls)."""
        target = self.unwrap(module)
        with self._gathered(target, modifier_rank=None):
            return {name: value.detach().clone() for name, value in target.state_dict().items()}

    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """Empty: DeepSpeed writes the optimizer state in its own files."""
        return {}

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str,
                        storage_options: dict[str, Any] | None = None) -> None:
        """DeepSpeed's checkpoint directory at ``path`` (every rank writes its part), the rest of ``checkpoint``
        beside it; whole or not at all (``framework.io.deepspeed_dir``).

        :raises MisconfigurationError: where ``storage_options`` are given.
        """
        from framework.io.deepspeed_dir import save_deepspeed

        if storage_options:
            raise MisconfigurationError(f"storage_options={describe(storage_options)}: DeepSpeed writes its files "
                                        "itself, to a local filesystem, and takes no storage options.")
        engine = self.engine if self.engine is not None else self._start_engine(None)
        state = {**checkpoint, "state_dict": {}}
        if "optimizer_states" in checkpoint:
            state["optimizer_states"] = [{} for _ in checkpoint["optimizer_states"]]

        def write(directory: str, tag: str) -> None:
            engine.save_checkpoint(directory, tag=tag, client_state={},
                                   exclude_frozen_parameters=self.exclude_frozen_parameters)

        save_deepspeed(write, state, path, self.is_global_zero, lambda: self.barrier("save_checkpoint"))

    def load_checkpoint(self, path: str, weights_only: bool | None = None) -> dict[str, Any]:
        """The run's state saved beside DeepSpeed's files; the weights and optimizer state are read by the engine
        (``load_module_state``). A one-file checkpoint loads as whole weights.

        :raises CheckpointError: where ``path`` is a zero2/zero3 (FSDP2) checkpoint, or a DeepSpeed one that is
            incomplete or damaged.
        """
        from framework.io.checkpoint_dir import is_sharded_checkpoint
        from framework.io.deepspeed_dir import is_complete_deepspeed, is_deepspeed_checkpoint, read_deepspeed_state
        from framework.strategies.deepspeed_checkpoint import check_files

        if is_sharded_checkpoint(path):
            raise CheckpointError(
                f"Checkpoint {path!r} was written by a zero2/zero3 (FSDP2) run; DeepSpeed cannot resume it. Turn it "
                f"into one file (`framework consolidate {path} model.ckpt`) and load its weights from that file "
                "(ckpt_path='model.ckpt' loads the weights; the optimizer state starts afresh), or resume with the "
                "strategy that wrote it.")
        if not is_deepspeed_checkpoint(path):
            return super().load_checkpoint(path, weights_only)
        if not is_complete_deepspeed(path):
            raise CheckpointError(f"DeepSpeed checkpoint {path!r} is incomplete (a save cut short) or damaged.")
        check_files(path)
        state = read_deepspeed_state(path)
        state["state_dict"] = DeepSpeedWeights(path)
        return state

    def load_module_state(self, module: nn.Module, state_dict: dict[str, Any], strict: bool = True) -> Any:
        """DeepSpeed's files: read by the engine now, or as soon as it exists. Whole weights (a one-file
        checkpoint): loaded into the module (gathered under ZeRO-3), and the engine's master copies after them."""
        if isinstance(state_dict, DeepSpeedWeights):
            self._pending = (state_dict.path, strict)
            if self.engine is not None:
                self._load_pending()
            return None
        target = self.unwrap(module)
        with self._gathered(target, modifier_rank=0):
            result = target.load_state_dict(state_dict, strict=strict)
        restore = getattr(getattr(self.engine, "optimizer", None), "_restore_from_bit16_weights", None)
        if restore is not None:
            restore()
        return result

    def load_optimizer_state(self, optimizer: Optimizer, state: dict[str, Any]) -> None:
        """Nothing: the engine read it with the weights. A torch optimizer's state (another strategy's
        checkpoint) is refused.

        :raises CheckpointError: where ``state`` is not empty (a torch optimizer's, from another strategy).
        """
        if state:
            raise CheckpointError(
                "The checkpoint holds a torch optimizer's state, written by another strategy; DeepSpeed's ZeRO "
                "optimizer cannot take it. Load only its weights (Module.load_from_checkpoint, then fit without "
                "ckpt_path), or resume with the strategy that wrote it.")

    def _load_pending(self) -> None:
        path, strict = self._pending
        self._pending = None
        if self._trains:
            loaded, _ = self.engine.load_checkpoint(path, load_module_strict=strict, load_optimizer_states=True,
                                                    load_lr_scheduler_states=False)
            if loaded is None:
                raise CheckpointError(f"DeepSpeed could not read the checkpoint {path!r}.")
            return
        from framework.strategies.deepspeed_checkpoint import consolidated_weights

        self.load_module_state(self._router, consolidated_weights(path), strict=strict)

    @contextlib.contextmanager
    def _gathered(self, module: nn.Module, modifier_rank: int | None) -> Iterator[None]:
        if self.engine is None or self.zero_stage != 3:
            yield
            return
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=modifier_rank):
            yield
