"""Model weights on disk as Hugging Face lays them out: ``model.safetensors`` (with safetensors installed) or
``pytorch_model.bin``, split into numbered shards with an index file past ``max_shard_size``."""

from __future__ import annotations

import json
import os
import re
import warnings
from typing import Any

import torch

from framework.checks import is_int
from framework.errors import MisconfigurationError, describe
from framework.io.checkpoint_storage import load_checkpoint, save_checkpoint
from framework.io.fs import write_bytes_atomic

_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30,
          "TIB": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?I?B)\s*$", re.IGNORECASE)


def safetensors_available(asked: bool) -> bool:
    """Whether to write safetensors: asked for and installed (else ``.bin`` files, said once)."""
    if not asked:
        return False
    import importlib.util

    if importlib.util.find_spec("safetensors") is None:
        warnings.warn("safe_serialization=True, but safetensors is not installed: the weights are written as "
                      "pytorch_model.bin (torch.load(weights_only=True) reads them). "
                      'pip install "framework[safetensors]" for model.safetensors.', stacklevel=3)
        return False
    return True


def weights_file(index: int, safe: bool) -> str:
    """``model.safetensors`` / ``pytorch_model.bin`` for the first model, ``model_1.safetensors`` ... after."""
    stem, suffix = ("model", ".safetensors") if safetensors_available(safe) else ("pytorch_model", ".bin")
    return f"{stem}_{index}{suffix}" if index else f"{stem}{suffix}"


def write_weights(state: dict[str, torch.Tensor], path: str, as_safetensors: bool | None = None) -> None:
    """Write one state dict to ``path`` atomically, as safetensors when asked, or by default when ``path`` ends in
    ``.safetensors``."""
    if path.endswith(".safetensors") if as_safetensors is None else as_safetensors:
        from safetensors.torch import save

        write_bytes_atomic(path, save(_separate(state), metadata={"format": "pt"}))
    else:
        save_checkpoint(state, path)


def read_weights_file(path: str) -> dict[str, torch.Tensor]:
    """One weights file: ``.safetensors``, or a file ``torch.save`` wrote (read with ``weights_only=True``)."""
    return _read(path)


def read_saved_model(checkpoint: str) -> dict[str, torch.Tensor]:
    """The whole state dict ``save_model`` (or Hugging Face) wrote: one weights file, a shards' ``.index.json``, or
    the folder holding either."""
    if os.path.isdir(checkpoint):
        found = [name for name in ("model.safetensors.index.json", "pytorch_model.bin.index.json", "model.safetensors",
                                   "pytorch_model.bin") if os.path.exists(os.path.join(checkpoint, name))]
        if not found:
            raise FileNotFoundError(f"{checkpoint!r} holds no model.safetensors, pytorch_model.bin or shards' index.")
        checkpoint = os.path.join(checkpoint, found[0])
    if not checkpoint.endswith(".index.json"):
        return _read(checkpoint)
    with open(checkpoint) as file:
        shards = sorted(set(json.load(file)["weight_map"].values()))
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        state.update(_read(os.path.join(os.path.dirname(checkpoint), shard)))
    return state


def read_weights(folder: str, index: int) -> dict[str, torch.Tensor]:
    """The state dict ``write_weights`` wrote for model ``index`` in ``folder``, whichever format it took."""
    for name in (weights_file(index, True) if _has_safetensors() else None, weights_file(index, False)):
        if name is not None and os.path.exists(os.path.join(folder, name)):
            return _read(os.path.join(folder, name))
    raise FileNotFoundError(f"load_state({folder!r}): no weights for model {index} (model{_suffix(index)}.safetensors "
                            f"or pytorch_model{_suffix(index)}.bin).")


def save_sharded_weights(state: dict[str, torch.Tensor], folder: str, max_shard_size: int | str, safe: bool) -> None:
    """Write ``state`` to ``folder`` in shards of at most ``max_shard_size`` bytes (one file when it fits), with
    ``<name>.index.json`` mapping each weight to its file; earlier files of that naming are removed."""
    limit = parse_size(max_shard_size)
    safe = safetensors_available(safe)
    stem, suffix = ("model", ".safetensors") if safe else ("pytorch_model", ".bin")
    shards = _split(state, limit)
    os.makedirs(folder, exist_ok=True)
    _remove_earlier(folder, stem, suffix)
    names = [f"{stem}{suffix}"] if len(shards) == 1 else [
        f"{stem}-{number:05d}-of-{len(shards):05d}{suffix}" for number in range(1, len(shards) + 1)]
    for name, shard in zip(names, shards, strict=False):
        write_weights(shard, os.path.join(folder, name))
    if len(shards) > 1:
        index = {"metadata": {"total_size": sum(_bytes(tensor) for tensor in state.values())},
                 "weight_map": {key: name for name, shard in zip(names, shards, strict=False) for key in shard}}
        write_bytes_atomic(os.path.join(folder, f"{stem}{suffix}.index.json"),
                           json.dumps(index, indent=2, sort_keys=True).encode())


def parse_size(size: int | str) -> int:
    """Bytes from an int or a string such as ``"10GB"`` or ``"500MiB"``."""
    if is_int(size) and size > 0:
        return size
    found = _SIZE.match(size) if isinstance(size, str) else None
    if found is None:
        raise MisconfigurationError(f"max_shard_size={describe(size)}: accepted a number of bytes or a string such "
                                    "as '10GB' or '500MiB'.")
    return int(float(found.group(1)) * _UNITS[found.group(2).upper()])


def _split(state: dict[str, torch.Tensor], limit: int) -> list[dict[str, torch.Tensor]]:
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for key, tensor in state.items():
        if shards[-1] and size + _bytes(tensor) > limit:
            shards.append({})
            size = 0
        shards[-1][key] = tensor
        size += _bytes(tensor)
    return shards


def _separate(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tensors sharing memory (tied weights) copied apart, as safetensors stores each tensor on its own."""
    seen: set[tuple[int, int]] = set()
    separate = {}
    for key, tensor in state.items():
        tensor = tensor.detach().cpu()
        where = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        separate[key] = tensor.clone().contiguous() if where in seen or not tensor.is_contiguous() else tensor
        seen.add(where)
    return separate


def _remove_earlier(folder: str, stem: str, suffix: str) -> None:
    pattern = re.compile(rf"^{re.escape(stem)}(-\d{{5}}-of-\d{{5}})?{re.escape(suffix)}(\.index\.json)?$")
    for name in os.listdir(folder):
        if pattern.match(name):
            os.remove(os.path.join(folder, name))


def _read(path: str) -> dict[str, torch.Tensor]:
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        return load_file(path)
    return load_checkpoint(path, map_location="cpu")


def _has_safetensors() -> bool:
    import importlib.util

    return importlib.util.find_spec("safetensors") is not None


def _bytes(tensor: Any) -> int:
    return tensor.numel() * tensor.element_size() if isinstance(tensor, torch.Tensor) else 0


def _suffix(index: int) -> str:
    return f"_{index}" if index else ""
