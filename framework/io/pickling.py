"""Objects sent between ranks, as bytes: pickled, with each tensor carried as its raw bytes.

Pickle alone hands a tensor's storage to ``torch.save`` (into memory), so every object collective
would call ``torch.save``, and code that watches ``torch.save`` to count the checkpoints written
(Lightning's tests do) would count the ranks' messages too. Here a dense tensor travels as its
dtype, shape, device and bytes; anything else (``nn.Parameter`` and other subclasses, sparse,
quantized or meta tensors) is pickled as pickle does it.

Like pickle, ``loads`` runs code named in the data: only for bytes from this job's own ranks.

Example::

    data = dumps({"step": torch.tensor(7), "rng": torch.get_rng_state()})
    loads(data)["step"]            # tensor(7), a copy
"""

from __future__ import annotations

import copyreg
import io
import pickle
from typing import Any

import torch


def dumps(obj: Any) -> bytes:
    """``obj`` as bytes for ``loads``, without ``torch.save``."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _DISPATCH  # looked up by exact type: subclasses of Tensor keep their own reduction
    pickler.dump(obj)
    return buffer.getvalue()


def loads(data: bytes) -> Any:
    """The object ``dumps`` gave ``data`` for; its tensors are new tensors (none shares memory with another)."""
    return pickle.loads(data)


def _reduce_tensor(tensor: torch.Tensor) -> tuple:
    if tensor.layout is not torch.strided or tensor.is_quantized or tensor.is_meta:
        return tensor.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
    plain = tensor.detach().resolve_conj().resolve_neg().cpu().contiguous()
    raw = plain.reshape(-1).view(torch.uint8).numpy()  # any dtype, bfloat16 too, as bytes
    return _rebuild_tensor, (pickle.PickleBuffer(raw), plain.dtype, tuple(plain.shape), str(tensor.device),
                             tensor.requires_grad)


def _rebuild_tensor(raw: Any, dtype: torch.dtype, shape: tuple[int, ...], device: str,
                    requires_grad: bool) -> torch.Tensor:
    if len(raw):
        tensor = torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape)
    else:  # frombuffer refuses an empty buffer
        tensor = torch.empty(shape, dtype=dtype)
    if device != "cpu":
        tensor = tensor.to(device)
    return tensor.requires_grad_(requires_grad)


_DISPATCH = {**copyreg.dispatch_table, torch.Tensor: _reduce_tensor}
