"""Reading DeepSpeed's checkpoint files without running code, and turning them into one state dict.

DeepSpeed pickles a few of its own objects into its files (its loss scaler, the ZeRO stage enum, fragment
addresses) and reads them back with ``torch.load(weights_only=False)``, which would run any code a file
holds. Before DeepSpeed (or ``zero_to_fp32``) reads a checkpoint, every file is first read here with
``weights_only=True`` allowing exactly those classes (memory-mapped: only the pickled structure is read);
a file holding anything else is refused, naming it.

Example::

    check_files("epoch=3.ckpt")                  # raises CheckpointError for a file holding other objects
    weights = consolidated_weights("epoch=3.ckpt")   # {name: fp32 tensor}, as zero_to_fp32 gives it
"""

from __future__ import annotations

import os
import pickle
from typing import Any

import torch

from framework.errors import CheckpointError
from framework.io.deepspeed_dir import model_files, tag_of

#: What the router DeepSpeed wraps adds before every name of the user's module.
ROUTER_PREFIX = "module."
_MODEL_FILE = "mp_rank_00_model_states.pt"


def allowed_classes() -> list[Any]:
    """The classes DeepSpeed pickles into its checkpoint files, which may be read back."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address]


def check_files(path: str | os.PathLike) -> None:
    """Refuse a DeepSpeed checkpoint directory any of whose files holds objects other than tensors, plain data
    and DeepSpeed's own few (``allowed_classes``)."""
    allowed = allowed_classes()
    for file in model_files(path):
        try:
            with torch.serialization.safe_globals(allowed):
                torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        except pickle.UnpicklingError as error:
            raise CheckpointError(
                f"{file} holds objects other than tensors, plain data and DeepSpeed's own, so it is not read: "
                f"unpickling it could run code ({str(error).splitlines()[0][:200]}). Only a file you trust should "
                "be read otherwise.") from None
        except (OSError, RuntimeError) as error:
            raise CheckpointError(f"{file} could not be read ({type(error).__name__}: {str(error)[:200]}); the "
                                  "DeepSpeed checkpoint is damaged.") from None


def consolidated_weights(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The user's module's weights in a DeepSpeed checkpoint directory, whole and in fp32 (from the ZeRO
    partitions of the fp32 master weights, as ``zero_to_fp32`` gathers them), with the names the module gives
    them. Read on one process, without torch.distributed."""
    check_files(path)
    folder = os.path.join(os.fspath(path), tag_of(path))
    if any(name.startswith("zero_pp_rank_") or name.startswith("bf16_zero_pp_rank_") for name in os.listdir(folder)):
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        weights = get_fp32_state_dict_from_zero_checkpoint(os.fspath(path), tag=tag_of(path))
    else:  # no ZeRO: the module's whole state is in the model file
        with torch.serialization.safe_globals(allowed_classes()):
            saved = torch.load(os.path.join(folder, _MODEL_FILE), map_location="cpu", weights_only=True)
        weights = {name: tensor.float() if tensor.is_floating_point() else tensor
                   for name, tensor in saved["module"].items()}
    return {name.removeprefix(ROUTER_PREFIX): tensor for name, tensor in weights.items()}


def consolidate_deepspeed(checkpoint_dir: str | os.PathLike, output_file: str | os.PathLike) -> None:
    """Write the DeepSpeed checkpoint directory ``checkpoint_dir`` as one file, as ``zero_to_fp32`` does but in the
    Trainer's checkpoint form: the run's state with the whole fp32 weights under ``"state_dict"``. DeepSpeed's
    optimizer state does not carry over (it is laid out for its ZeRO optimizer), so the file loads with
    ``Module.load_from_checkpoint`` and as weights (``ckpt_path=`` in validate, test, predict), not as a resume.

    Example::

        consolidate_deepspeed("checkpoints/last.ckpt", "last-weights.ckpt")
    """
    from framework.io.checkpoint_file import save_checkpoint_file
    from framework.io.deepspeed_dir import KEY, is_complete_deepspeed, read_deepspeed_state

    if not is_complete_deepspeed(checkpoint_dir):
        raise CheckpointError(f"{os.fspath(checkpoint_dir)!r} is not a complete DeepSpeed checkpoint directory "
                              "(one a DeepSpeedStrategy run saved, whole).")
    state = read_deepspeed_state(checkpoint_dir)
    state.pop(KEY, None)
    state.pop("optimizer_states", None)
    state["state_dict"] = consolidated_weights(checkpoint_dir)
    save_checkpoint_file(state, output_file)


def convert_zero_checkpoint_to_fp32_state_dict(checkpoint_dir: str | os.PathLike, output_file: str | os.PathLike,
                                               tag: str | None = None) -> None:
    """Lightning's name for ``consolidate_deepspeed`` (``framework consolidate``); ``tag`` is accepted as in
    Lightning, and the directory's own ``latest`` tag is read."""
    consolidate_deepspeed(checkpoint_dir, output_file)
