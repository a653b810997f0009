"""Atomic writes through fsspec."""

from __future__ import annotations

import os
import threading

import pytest

from framework.io.fs import leftover_temporaries, read_bytes, write_atomic, write_bytes_atomic


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files through /proc")
def test_a_large_replaced_file_is_freed_in_the_background_and_not_leaked(tmp_path):
    path = tmp_path / "last.ckpt"
    big = 65 * 2**20
    write_atomic(path, lambda file: file.write(b"a" * big))
    before = _open_descriptors()
    write_atomic(path, lambda file: file.write(b"b" * big))
    for thread in threading.enumerate():
        if thread.name == "framework-free-replaced-file":
            thread.join(timeout=30)
    assert _open_descriptors() == before  # the old file's handle was closed, so its space is freed
    with open(path, "rb") as file:
        assert file.read(1) == b"b" and os.fstat(file.fileno()).st_size == big
    assert leftover_temporaries(tmp_path) == []


def test_replacing_a_symlink_replaces_the_link_not_its_target(tmp_path):
    target = tmp_path / "epoch=1.ckpt"
    target.write_bytes(b"kept")
    os.symlink(target.name, tmp_path / "last.ckpt")
    write_bytes_atomic(tmp_path / "last.ckpt", b"new")
    assert not os.path.islink(tmp_path / "last.ckpt") and read_bytes(tmp_path / "last.ckpt") == b"new"
    assert target.read_bytes() == b"kept"


def test_leftover_temporaries_match_only_write_atomic_names(tmp_path):
    for name in ["a.ckpt.tmp-0123abcd", "b.yaml.tmp-89abcdef", "c.ckpt.tmp-xyz", "d.ckpt"]:
        (tmp_path / name).write_bytes(b"")
    assert sorted(map(os.path.basename, leftover_temporaries(tmp_path))) == ["a.ckpt.tmp-0123abcd",
                                                                              "b.yaml.tmp-89abcdef"]
    assert list(map(os.path.basename, leftover_temporaries(tmp_path, ".ckpt"))) == ["a.ckpt.tmp-0123abcd"]
