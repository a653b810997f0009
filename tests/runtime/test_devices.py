"""Parsing ``accelerator=`` and ``devices=``, and the Runtime's check that devices fit the strategy."""

from __future__ import annotations

import os
import re

import pytest
import torch

import framework
from framework import Runtime
from framework.errors import MisconfigurationError
from framework.runtime.devices import ACCELERATORS, device_for, resolve_accelerator, resolve_devices

NO_CUDA = not torch.cuda.is_available()
_mps = getattr(torch.backends, "mps", None)
NO_MPS = not (_mps is not None and _mps.is_available())


# -- accelerator --------------------------------------------------------------------------------------

@pytest.mark.parametrize("spelling", ["cpu", "CPU", "Cpu"])
def test_cpu_in_any_case(spelling):
    assert resolve_accelerator(spelling) == "cpu"


@pytest.mark.skipif(not (NO_CUDA and NO_MPS), reason="'auto' picks an accelerator that is present")
def test_auto_is_cpu_without_accelerators():
    assert resolve_accelerator("auto") == "cpu"


@pytest.mark.skipif(NO_CUDA, reason="needs CUDA")
@pytest.mark.parametrize("spelling", ["auto", "gpu", "cuda", "GPU"])
def test_auto_and_gpu_alias_give_cuda_when_present(spelling):
    assert resolve_accelerator(spelling) == "cuda"


@pytest.mark.skipif(not NO_CUDA, reason="CUDA is present")
@pytest.mark.parametrize("spelling", ["gpu", "cuda", "GPU"])
def test_gpu_without_cuda_raises_a_clear_error(spelling):
    expected = rf"accelerator='{spelling}' was asked for, but torch\.cuda\.is_available\(\) is False"
    with pytest.raises(MisconfigurationError, match=expected) as info:
        resolve_accelerator(spelling)
    assert "accelerator='cpu'" in str(info.value)  # says what to use instead


@pytest.mark.skipif(not NO_MPS, reason="MPS is present")
def test_mps_without_mps_raises():
    with pytest.raises(MisconfigurationError, match=r"accelerator='mps'.*MPS is not available"):
        resolve_accelerator("mps")


@pytest.mark.parametrize("value", ["tpux", "", None, 1, ["cpu"]])
def test_unknown_accelerator_lists_the_accepted_ones(value):
    with pytest.raises(MisconfigurationError, match=r"accelerator=.*is not supported") as info:
        resolve_accelerator(value)
    message = str(info.value)
    assert repr(value) in message
    for name in ACCELERATORS:
        assert repr(name) in message


# -- devices ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("devices", "expected"), [
    ("auto", [0]),
    (1, [0]),
    ("1", [0]),
    (" 1 ", [0]),
    (3, [0, 1, 2]),
    ("2", [0, 1]),
    ([0], [0]),
    ((0,), [0]),
    ([1, 3], [1, 3]),
    ("0,1", [0, 1]),
    ("0, 2", [0, 2]),
])
def test_cpu_devices(devices, expected):
    assert resolve_devices(devices, "cpu") == expected


@pytest.mark.parametrize("devices", [-1, "-1"])
def test_minus_one_is_every_cpu(devices):
    assert resolve_devices(devices, "cpu") == list(range(os.cpu_count() or 1))


@pytest.mark.parametrize("devices", [
    "x", 0, "0", -2, "-2", 1.0, "1.5", True, [], [-1], ["0"], "AUTO", None, {0: 1},
])
def test_bad_devices_name_the_value_and_the_accepted_forms(devices):
    with pytest.raises(MisconfigurationError, match=r"devices=.*is not understood") as info:
        resolve_devices(devices, "cpu")
    message = str(info.value)
    assert f"devices={devices!r}" in message
    assert "'auto', a positive int, -1 (all)" in message


@pytest.mark.parametrize("devices", [[0, 0], "0,0"])
def test_duplicate_device_indices_are_rejected(devices):
    with pytest.raises(MisconfigurationError, match=r"devices="):
        resolve_devices(devices, "cpu")


def test_bool_device_index_is_rejected():
    with pytest.raises(MisconfigurationError, match=r"devices=\[True\]"):
        resolve_devices([True], "cpu")


@pytest.mark.skipif(NO_CUDA, reason="needs CUDA")
def test_more_cuda_devices_than_present():
    count = torch.cuda.device_count()
    too_many = count + 1
    with pytest.raises(MisconfigurationError, match=rf"devices={too_many} asks for {too_many} cuda devices"):
        resolve_devices(count + 1, "cuda")
    with pytest.raises(MisconfigurationError, match=rf"names cuda device {count}"):
        resolve_devices([count], "cuda")
    assert resolve_devices("auto", "cuda") == list(range(count))
    assert resolve_devices(-1, "cuda") == list(range(count))


def test_device_for():
    assert device_for("cpu", 3) == torch.device("cpu")
    assert device_for("cuda", 1) == torch.device("cuda", 1)


# -- Runtime ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("devices", [2, "2", [0, 1], "0,1", -1])
def test_several_devices_with_the_single_device_strategy(devices):
    if devices == -1 and (os.cpu_count() or 1) < 2:
        pytest.skip("-1 means one device on a one-CPU machine")
    expected = re.escape(f"devices={devices!r} with num_nodes=1 needs one process per device")
    expected += ".*SingleDeviceStrategy"
    with pytest.raises(MisconfigurationError, match=expected) as info:
        Runtime(accelerator="cpu", devices=devices, strategy="single")
    assert "devices=1" in str(info.value)  # says what works


def test_several_nodes_with_the_single_device_strategy():
    with pytest.raises(MisconfigurationError, match=r"devices=1 with num_nodes=2 needs one process per"):
        Runtime(accelerator="cpu", devices=1, num_nodes=2, strategy="single")


def test_several_nodes_without_a_launcher_are_refused_with_the_command_that_starts_them():
    # forking devices x num_nodes ranks on this one machine gave ranks without a device (an IndexError)
    expected = r"num_nodes=2 needs a launcher on each machine.*framework launch --nproc-per-node 2 --nnodes 2"
    with pytest.raises(MisconfigurationError, match=expected):
        Runtime(accelerator="cpu", devices=2, num_nodes=2)
    with pytest.raises(MisconfigurationError, match=expected):
        framework.Trainer(accelerator="cpu", devices=2, num_nodes=2, logger=False)


@pytest.mark.parametrize("num_nodes", [0, -1, 1.0, True, "1"])
def test_bad_num_nodes(num_nodes):
    expected = rf"num_nodes={num_nodes!r} \(type \w+\) must be a positive int"
    with pytest.raises(MisconfigurationError, match=expected):
        Runtime(accelerator="cpu", num_nodes=num_nodes)


def test_runtime_on_one_cpu():
    runtime = Runtime(accelerator="cpu", devices="auto")
    assert runtime.accelerator == "cpu" and runtime.device_ids == [0]
    assert runtime.device == torch.device("cpu")
    assert runtime.world_size == 1 and runtime.is_global_zero
