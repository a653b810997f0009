"""The bare Runtime API (no Trainer): a hand-written loop equals the same plain PyTorch loop."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch
from torch import nn

import framework
from framework import MisconfigurationError, Runtime
from tests.helpers import regression_data


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def _batches(n: int = 48, batch_size: int = 8):
    data = regression_data(n)
    x, y = data.tensors
    return [(x[i:i + batch_size], y[i:i + batch_size]) for i in range(0, n, batch_size)]


def _plain_loop(clip: str | None, amount: float) -> tuple[nn.Module, list[float]]:
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    norms = []
    for x, y in _batches():
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if clip == "norm":
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), amount)))
        elif clip == "value":
            torch.nn.utils.clip_grad_value_(model.parameters(), amount)
        optimizer.step()
        optimizer.zero_grad()
    return model, norms


def _runtime_loop(clip: str | None, amount: float) -> tuple[nn.Module, list[float]]:
    runtime = Runtime(accelerator="cpu")
    model = _model()
    model, optimizer = runtime.setup(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    norms = []
    for batch in _batches():
        x, y = runtime.to_device(batch)
        with runtime.autocast():
            loss = nn.functional.mse_loss(model(x), y)
        runtime.backward(loss)
        if clip == "norm":
            norms.append(float(runtime.clip_gradients(model, optimizer, max_norm=amount)))
        elif clip == "value":
            assert runtime.clip_gradients(model, optimizer, clip_val=amount) is None
        assert runtime.optimizer_step(optimizer) is True
        optimizer.zero_grad()
    return model, norms


def _assert_same_weights(actual: nn.Module, expected: nn.Module) -> None:
    expected_state = expected.state_dict()
    for name, value in actual.state_dict().items():
        torch.testing.assert_close(value, expected_state[name], msg=lambda m, name=name: f"{name}: {m}")


def test_runtime_loop_equals_plain_loop():
    actual, _ = _runtime_loop(None, 0.0)
    expected, _ = _plain_loop(None, 0.0)
    _assert_same_weights(actual, expected)
    # and it did train: the weights moved away from their initial values
    assert not torch.equal(actual[0].weight, _model()[0].weight)


def test_clip_by_norm_equals_plain_loop_and_returns_the_norm():
    actual, norms = _runtime_loop("norm", 0.5)
    expected, expected_norms = _plain_loop("norm", 0.5)
    _assert_same_weights(actual, expected)
    torch.testing.assert_close(torch.tensor(norms), torch.tensor(expected_norms))
    assert max(expected_norms) > 0.5  # clipping really changed the gradients
    unclipped, _ = _plain_loop(None, 0.0)
    assert not torch.allclose(actual[0].weight, unclipped[0].weight)


def test_clip_by_value_equals_plain_loop():
    actual, _ = _runtime_loop("value", 0.05)
    expected, _ = _plain_loop("value", 0.05)
    _assert_same_weights(actual, expected)
    unclipped, _ = _plain_loop(None, 0.0)
    assert not torch.allclose(actual[0].weight, unclipped[0].weight)


@pytest.mark.parametrize("kwargs", [{}, {"clip_val": 0.1, "max_norm": 1.0}], ids=["neither", "both"])
def test_clip_gradients_needs_exactly_one_argument(kwargs):
    runtime = Runtime(accelerator="cpu")
    model = _model()
    model, optimizer = runtime.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    model(torch.ones(2, 4)).sum().backward()
    before = [p.grad.clone() for p in model.parameters()]
    with pytest.raises(MisconfigurationError, match="clip_val.*max_norm"):
        runtime.clip_gradients(model, optimizer, **kwargs)
    for grad, p in zip(before, model.parameters()):
        torch.testing.assert_close(p.grad, grad)  # nothing was clipped


def test_setup_returns_module_alone_or_with_optimizers():
    runtime = Runtime(accelerator="cpu")
    model = _model()
    alone = runtime.setup(model)
    assert alone.module is model and alone(torch.ones(1, 4)).shape == (1, 1)
    first = torch.optim.SGD(model.parameters(), lr=0.1)
    second = torch.optim.Adam(model.parameters(), lr=0.1)
    returned = runtime.setup(model, first, second)
    assert isinstance(returned, tuple) and len(returned) == 3
    assert returned[0].module is model and returned[1].optimizer is first and returned[2].optimizer is second
    # they stand in for the originals: isinstance, state dicts without a prefix, shared param groups
    assert isinstance(returned[1], torch.optim.SGD) and isinstance(returned[2], torch.optim.Adam)
    assert list(returned[0].state_dict()) == list(model.state_dict())
    returned[1].param_groups[0]["lr"] = 0.5
    assert first.param_groups[0]["lr"] == 0.5
    scheduler = torch.optim.lr_scheduler.StepLR(returned[1], step_size=1, gamma=0.1)
    returned[1].step()
    scheduler.step()
    assert first.param_groups[0]["lr"] == pytest.approx(0.05)


def test_to_device_keeps_structure_and_dtype():
    runtime = Runtime(accelerator="cpu")
    assert runtime.device == torch.device("cpu")
    batch = {"x": torch.ones(2, dtype=torch.float64), "meta": ("a", 1)}
    moved = runtime.to_device(batch)
    assert moved["x"].dtype == torch.float64 and moved["meta"] == ("a", 1)


def test_single_device_ranks():
    runtime = Runtime(accelerator="cpu")
    assert runtime.world_size == 1
    assert runtime.global_rank == 0
    assert runtime.local_rank == 0
    assert runtime.node_rank == 0
    assert runtime.is_global_zero is True
    tensor = torch.tensor([1.0, 2.0])
    torch.testing.assert_close(runtime.all_reduce(tensor), tensor)
    torch.testing.assert_close(runtime.all_gather(tensor), tensor.unsqueeze(0))
    assert runtime.broadcast({"a": 1}) == {"a": 1}


def _trained_pair():
    runtime = Runtime(accelerator="cpu")
    model = _model()
    model, optimizer = runtime.setup(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    for batch in _batches()[:3]:
        x, y = runtime.to_device(batch)
        runtime.backward(nn.functional.mse_loss(model(x), y))
        runtime.optimizer_step(optimizer)
        optimizer.zero_grad()
    return runtime, model, optimizer


@pytest.mark.parametrize("where", ["local", "memory"])
def test_save_then_load_restores_weights_and_returns_the_rest(tmp_path, memory_root, where):
    path = str(tmp_path / "state.ckpt") if where == "local" else f"{memory_root}/state.ckpt"
    runtime, model, optimizer = _trained_pair()
    runtime.save(path, {"model": model, "optimizer": optimizer, "step": 3})

    runtime2 = Runtime(accelerator="cpu")
    torch.manual_seed(123)
    model2 = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    model2, optimizer2 = runtime2.setup(model2, torch.optim.SGD(model2.parameters(), lr=0.05, momentum=0.9))
    assert not torch.equal(model2[0].weight, model[0].weight)
    rest = runtime2.load(path, {"model": model2, "optimizer": optimizer2})
    assert rest == {"step": 3}
    _assert_same_weights(model2, model)
    # the momentum buffers came back too: one more identical step gives identical weights
    saved_state = optimizer.state_dict()["state"]
    loaded_state = optimizer2.state_dict()["state"]
    assert set(saved_state) == set(loaded_state) and saved_state
    for key in saved_state:
        torch.testing.assert_close(loaded_state[key]["momentum_buffer"], saved_state[key]["momentum_buffer"])
    x, y = _batches()[4]
    for m, opt in ((model, optimizer), (model2, optimizer2)):
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
        opt.zero_grad()
    _assert_same_weights(model2, model)


def test_saved_file_loads_with_plain_torch_weights_only(tmp_path):
    path = tmp_path / "state.ckpt"
    runtime, model, optimizer = _trained_pair()
    runtime.save(path, {"model": model, "optimizer": optimizer, "step": 3})
    loaded = torch.load(path, weights_only=True)
    assert set(loaded) == {"model", "optimizer", "step"}
    assert loaded["step"] == 3
    for name, value in model.state_dict().items():
        torch.testing.assert_close(loaded["model"][name], value)
    assert loaded["optimizer"]["param_groups"][0]["lr"] == 0.05


def test_load_without_state_returns_everything(tmp_path):
    path = tmp_path / "state.ckpt"
    runtime, model, optimizer = _trained_pair()
    runtime.save(path, {"model": model, "step": 3})
    loaded = Runtime(accelerator="cpu").load(path)
    assert loaded["step"] == 3
    torch.testing.assert_close(loaded["model"]["0.weight"], model[0].weight.detach())


def test_load_overwrites_the_target_module_in_place(tmp_path):
    path = tmp_path / "state.ckpt"
    runtime, model, _ = _trained_pair()
    runtime.save(path, {"model": model})
    other = copy.deepcopy(model)
    with torch.no_grad():
        for p in other.parameters():
            p.zero_()
    runtime.load(path, {"model": other})
    _assert_same_weights(other, model)


@pytest.mark.parametrize(("precision", "dtype"), [("32-true", torch.float32), ("bf16-true", torch.bfloat16),
                                                  ("64-true", torch.float64), ("bf16-mixed", torch.float32)])
def test_init_module_creates_parameters_on_the_device_in_the_parameter_dtype(precision, dtype):
    runtime = Runtime(accelerator="cpu", precision=precision)
    with runtime.init_module():
        layer = torch.nn.Linear(4, 4)
    assert layer.weight.dtype == dtype and layer.weight.device == runtime.device
    assert torch.get_default_dtype() == torch.float32  # restored afterwards
    trainer = framework.Trainer(accelerator="cpu", precision=precision, logger=False)
    with trainer.init_module():
        assert torch.nn.Linear(2, 2).weight.dtype == dtype


class _Stepper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 4)

    def forward(self, x):
        return self.layer(x)

    def training_step(self, x):
        return self.layer(x)


def test_a_marked_method_runs_like_forward_under_the_precision():
    runtime = Runtime(accelerator="cpu", precision="bf16-mixed")
    model = runtime.setup(_Stepper())
    x = torch.ones(2, 4)
    assert model(x).dtype == torch.bfloat16
    assert model.training_step(x).dtype == torch.bfloat16  # marked by default, as forward
    with pytest.raises(AttributeError, match="no method 'nothing'"):
        model.mark_forward_method("nothing")


def test_clip_gradients_refuses_a_nonfinite_norm_unless_told_not_to():
    runtime = Runtime(accelerator="cpu")
    model = _Stepper()
    model, optimizer = runtime.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    runtime.backward(model(torch.ones(1, 4)).sum() * float("inf"))
    with pytest.raises(RuntimeError, match="non-finite"):
        runtime.clip_gradients(model, optimizer, max_norm=1.0)
    assert not torch.isfinite(runtime.clip_gradients(model, optimizer, max_norm=1.0, error_if_nonfinite=False))


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_epoch_end(self, epoch, loss=None):
        self.calls.append(("on_epoch_end", epoch, loss))


class _TakesEverything:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_epoch_end(self, *args, **kwargs):
        self.calls.append((args, kwargs))


def test_call_reaches_the_callbacks_that_have_the_hook_with_the_arguments_they_take():
    recorder, everything = _Recorder(), _TakesEverything()
    runtime = Runtime(accelerator="cpu", callbacks=[recorder, everything, object()])
    runtime.call("on_epoch_end", 3, loss=0.5, extra="left out where not taken")
    runtime.call("on_nothing", 1)
    assert recorder.calls == [("on_epoch_end", 3, 0.5)]
    assert everything.calls == [((3,), {"loss": 0.5, "extra": "left out where not taken"})]
    assert Runtime(accelerator="cpu", callbacks=recorder).callbacks == [recorder]


def test_log_and_log_dict_reach_the_loggers_as_numbers(tmp_path):
    from framework.loggers import CSVLogger

    logger = CSVLogger(tmp_path, name="run")
    runtime = Runtime(accelerator="cpu", loggers=logger)
    assert runtime.logger is logger and runtime.loggers == [logger]
    runtime.log("loss", torch.tensor(1.5))
    runtime.log_dict({"loss": 0.5, "acc": torch.tensor([0.25])}, step=7)
    with pytest.raises(ValueError, match="'wide' is a tensor of shape \\(2,\\)"):
        runtime.log("wide", torch.ones(2))
    runtime._finalize_loggers()  # what the process's end does
    rows = (tmp_path / "run" / "version_0" / "metrics.csv").read_text().splitlines()
    assert rows == ["acc,loss,step", ",1.5,0", "0.25,0.5,7"]
    assert Runtime(accelerator="cpu").logger is None


def test_logged_rows_are_written_when_the_script_ends_without_finalize(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        "import framework\nfrom framework.loggers import CSVLogger\n"
        f"runtime = framework.Runtime(accelerator='cpu', loggers=CSVLogger({str(tmp_path)!r}, name='run'))\n"
        "for step in range(3):\n    runtime.log('loss', 1.0 / (step + 1), step=step)\n"
    )
    subprocess.run([sys.executable, str(script)], check=True, timeout=120)
    assert (tmp_path / "run" / "version_0" / "metrics.csv").read_text().splitlines()[1:] == [
        "1.0,0", "0.5,1", "0.3333333333333333,2"]


def test_load_raw_reads_a_plain_state_dict_file_into_a_module_and_an_optimizer(tmp_path):
    runtime, model, optimizer = _trained_pair()
    torch.save(model.module.state_dict(), tmp_path / "weights.pt")
    torch.save(optimizer.optimizer.state_dict(), tmp_path / "optimizer.pt")
    fresh = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    fresh_model, fresh_optimizer = runtime.setup(fresh, torch.optim.SGD(fresh.parameters(), lr=0.05, momentum=0.9))
    runtime.load_raw(tmp_path / "weights.pt", fresh_model)
    runtime.load_raw(tmp_path / "optimizer.pt", fresh_optimizer)
    _assert_same_weights(fresh, model)
    assert fresh_optimizer.state_dict()["state"][0]["momentum_buffer"].equal(
        optimizer.state_dict()["state"][0]["momentum_buffer"])
    with pytest.raises(RuntimeError, match="Missing key"):
        runtime.load_raw(tmp_path / "weights.pt", nn.Linear(4, 1))
    with pytest.raises(TypeError, match="obj must be a torch.nn.Module or an optimizer"):
        runtime.load_raw(tmp_path / "weights.pt", {"not": "a module"})


@pytest.mark.parametrize(("precision", "dtype"), [("32-true", torch.float32), ("bf16-true", torch.bfloat16),
                                                  ("bf16-mixed", torch.float32)])
def test_init_tensor_creates_tensors_on_the_device_in_the_parameter_dtype(precision, dtype):
    runtime = Runtime(accelerator="cpu", precision=precision)
    with runtime.init_tensor():
        tensor = torch.empty(2)
    assert tensor.dtype == dtype and tensor.device == runtime.device
    assert torch.get_default_dtype() == torch.float32


def test_setup_hands_a_scheduler_back_last():
    runtime = Runtime(accelerator="cpu")
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    wrapped, wrapped_optimizer, same_scheduler = runtime.setup(model, optimizer, scheduler=scheduler)
    assert same_scheduler is scheduler and wrapped_optimizer.optimizer is optimizer


def test_the_set_up_optimizer_sees_the_state_and_groups_a_load_brings(tmp_path):
    runtime = framework.Runtime(accelerator="cpu")
    model = torch.nn.Linear(2, 1)
    model, optimizer = runtime.setup(model, torch.optim.Adam(model.parameters(), lr=0.5))
    runtime.backward(model(torch.ones(1, 2)).sum())
    optimizer.step()
    runtime.save(tmp_path / "state.ckpt", {"optimizer": optimizer})

    fresh = torch.nn.Linear(2, 1)
    fresh, fresh_optimizer = runtime.setup(fresh, torch.optim.Adam(fresh.parameters(), lr=0.1))
    runtime.load(tmp_path / "state.ckpt", {"optimizer": fresh_optimizer})
    assert len(fresh_optimizer.state) == 2  # Adam's moments, read through to the loaded optimizer
    scheduler = torch.optim.lr_scheduler.StepLR(fresh_optimizer, step_size=1, gamma=0.1)
    fresh_optimizer.step()
    scheduler.step()
    assert fresh_optimizer.optimizer.param_groups[0]["lr"] == pytest.approx(0.05)  # the loaded 0.5, then scheduled


_FORKS_AFTER_A_ONE_PROCESS_GROUP = """
import torch, torch.distributed as dist
import framework.testing

def total(rank):
    value = torch.tensor([rank + 1.0])
    dist.all_reduce(value)
    return value.item()

if __name__ == "__main__":
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # as a one-device zero3 fit
    dist.all_reduce(torch.ones(1))  # leaves gloo's threads waiting
    print(framework.testing.spawn(2, total))
"""


def test_ranks_forked_from_a_process_holding_a_used_one_process_group_join_their_own():
    # the parent's group, destroyed in a fork, would wait forever for gloo threads the fork does not have
    done = subprocess.run([sys.executable, "-c", _FORKS_AFTER_A_ONE_PROCESS_GROUP], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[3.0, 3.0]"
