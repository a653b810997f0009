"""Checkpoints with code planted in them, for the fault tests: a pickle that, when unpickled, creates a marker file
(``Path.touch``, nothing of the test suite, so a child process that loads it needs nothing importable).

``plant(directory, member, marker)`` puts the payload into one pickled member of a checkpoint directory:
``"metadata"`` (DCP's index, ``.metadata``), ``"meta"`` (``meta.pt``, the non-tensor part), ``"distcp"`` (a
tensor record of a part file, pointed at by the index) or ``"bytes"`` (an entry DCP stores as pickled bytes).
``assert_every_member_refuses_a_payload`` checks each on a copy of a directory written by a real run.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from framework.errors import UnsafeCheckpointError
from framework.io.checkpoint_storage import load_checkpoint

MEMBERS = ("metadata", "meta", "distcp", "bytes")
REFUSED_FILE = {"metadata": ".metadata", "meta": "meta.pt", "distcp": "__0_0.distcp", "bytes": "payload"}


class Payload:
    """Unpickling it creates ``marker``: what loading a checkpoint must never do unless told to trust it."""

    def __init__(self, marker: Path) -> None:
        self.marker = Path(marker)

    def __reduce__(self):
        return Path.touch, (self.marker,)


def _payload_bytes(marker: Path) -> bytes:
    buffer = io.BytesIO()
    torch.save(Payload(marker), buffer)
    return buffer.getvalue()


def plant(directory: Path, member: str, marker: Path) -> None:
    """Put the payload into ``member`` (one of ``MEMBERS``) of the checkpoint directory ``directory``."""
    directory = Path(directory)
    if member == "meta":
        skeleton = torch.load(directory / "meta.pt", weights_only=True)
        torch.save({**skeleton, "planted": Payload(marker)}, directory / "meta.pt")
        return
    with open(directory / ".metadata", "rb") as file:
        metadata = pickle.load(file)  # written by the run itself: trusted
    if member == "metadata":
        metadata.planner_data = Payload(marker)
    else:
        metadata = _pointing_at_the_payload(directory, metadata, member, marker)
    with open(directory / ".metadata", "wb") as file:
        pickle.dump(metadata, file)


def _pointing_at_the_payload(directory: Path, metadata, member: str, marker: Path):
    """``metadata`` with one record (a tensor's, or a new bytes entry's) pointing at the payload, appended to the
    first part file."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, MetadataIndex

    part = directory / "__0_0.distcp"
    offset, data = part.stat().st_size, _payload_bytes(marker)
    with open(part, "ab") as file:
        file.write(data)
    storage = dict(metadata.storage_data)
    if member == "distcp":
        index, info = next((index, info) for index, info in storage.items() if info.relative_path == part.name)
        storage[index] = dataclasses.replace(info, offset=offset, length=len(data))
    else:
        template = next(iter(storage.values()))
        storage[MetadataIndex("payload")] = dataclasses.replace(template, relative_path=part.name, offset=offset,
                                                                length=len(data))
        metadata.state_dict_metadata = {**metadata.state_dict_metadata, "payload": BytesStorageMetadata()}
    metadata.storage_data = storage
    return metadata


def planted_copy(directory: Path, member: str, where: Path) -> tuple[Path, Path]:
    """A copy of the checkpoint directory ``directory`` at ``where`` with the payload in ``member``, and the
    marker file the payload would create."""
    where.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(directory, where)
    marker = where.parent / f"{where.name}.ran"
    plant(where, member, marker)
    return where, marker


def assert_every_member_refuses_a_payload(directory: Path, scratch: Path) -> None:
    """On copies of ``directory``: a payload in each member is refused, naming the file, and runs nothing; the
    copy with the payload in ``.metadata`` does run it with ``weights_only=False`` (the payload is real)."""
    for member in MEMBERS:
        copy, marker = planted_copy(directory, member, scratch / f"{directory.name}-{member}")
        with pytest.raises(UnsafeCheckpointError, match=REFUSED_FILE[member]):
            load_checkpoint(copy, weights_only=True)
        assert not marker.exists(), f"loading a payload in {member} ran it"
    copy = scratch / f"{directory.name}-metadata"
    load_checkpoint(copy, weights_only=False)
    assert (scratch / f"{copy.name}.ran").exists()
