"""The Accelerator on one process: prepare, accumulation, precision, clipping and the settings a launcher leaves,
each checked against a plain PyTorch loop or the Runtime doing the same."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from framework.accelerate import Accelerator, DistributedType
from framework.accelerate.utils import (
    DistributedDataParallelKwargs,
    GradientAccumulationPlugin,
    GradScalerKwargs,
)
from framework.errors import MisconfigurationError
from tests.accelerate.loops import accelerate_loop, data, model_and_optimizer, runtime_loop, weights


def _plain_loop(accumulate: int, epochs: int = 2) -> dict[str, torch.Tensor]:
    model, optimizer = model_and_optimizer()
    loader = DataLoader(data(), batch_size=4, shuffle=True)
    for _ in range(epochs):
        for index, (x, y) in enumerate(loader, start=1):
            (torch.nn.functional.mse_loss(model(x), y) / accumulate).backward()
            if index % accumulate == 0 or index == len(loader):
                optimizer.step()
                optimizer.zero_grad()
    return weights(model)


@pytest.mark.parametrize("accumulate", [1, 3])
def test_the_loop_trains_as_a_plain_loop_and_as_the_runtime(accumulate):
    ran = accelerate_loop(accumulate=accumulate)
    plain, runtime = _plain_loop(accumulate), runtime_loop(accumulate=accumulate)["weights"]
    for name, value in ran["weights"].items():
        torch.testing.assert_close(value, plain[name], rtol=0, atol=0, msg=name)
        torch.testing.assert_close(value, runtime[name], rtol=0, atol=0, msg=name)
    # 16 batches a pass: every third syncs, and the pass's last (16) too; the count restarts with the next pass
    expected = [index % accumulate == 0 or index == 16 for index in range(1, 17)] * 2
    assert ran["syncs"] == expected


def test_prepare_keeps_the_order_and_passes_other_objects_through():
    model, optimizer = model_and_optimizer()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    accelerator = Accelerator(cpu=True)
    loader, prepared_scheduler, other, prepared_model, prepared_optimizer = accelerator.prepare(
        DataLoader(data(), batch_size=4), scheduler, "tokenizer", model, optimizer)
    assert other == "tokenizer"
    assert accelerator.unwrap_model(prepared_model) is model and prepared_optimizer.optimizer is optimizer
    assert isinstance(prepared_optimizer, torch.optim.SGD) and prepared_scheduler.scheduler is scheduler
    assert len(loader) == 16 and loader.total_batch_size == 4 and loader.dataset is loader.base_dataloader.dataset
    assert accelerator.prepare(prepared_model) is prepared_model  # prepared once only
    assert accelerator.distributed_type is DistributedType.NO and accelerator.num_processes == 1
    assert accelerator.is_main_process and accelerator.is_local_main_process and accelerator.is_last_process


def test_off_sync_batches_keep_the_gradients_and_the_scheduler_steps_with_the_optimizer():
    model, optimizer = model_and_optimizer()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    model.eval()  # no dropout: both batches give the same gradients
    x, y = data()[:4]
    before = weights(model)
    with accelerator.accumulate(model):
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        first_grad = model.module[0].weight.grad.clone()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    assert not accelerator.sync_gradients
    assert all(torch.equal(value, before[name]) for name, value in weights(model).items())
    assert torch.equal(model.module[0].weight.grad, first_grad) and scheduler.get_last_lr() == [0.05]
    with accelerator.accumulate(model):
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        torch.testing.assert_close(model.module[0].weight.grad, first_grad * 2)  # each half of the mean
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    assert accelerator.sync_gradients and model.module[0].weight.grad is None
    assert scheduler.get_last_lr() == [0.025] and not accelerator.optimizer_step_was_skipped


def test_mixed_precision_autocasts_the_forward_and_returns_float32():
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    model = accelerator.prepare(torch.nn.Linear(4, 2))
    output = model(torch.randn(3, 4))
    assert output.dtype is torch.float32 and accelerator.unwrap_model(model).weight.dtype is torch.float32
    with accelerator.autocast():
        assert torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype is torch.bfloat16
    reference = torch.nn.functional.linear(torch.ones(1, 4).bfloat16(), model.module.weight.bfloat16(),
                                           model.module.bias.bfloat16())
    assert torch.equal(model(torch.ones(1, 4)), reference.float())


def test_fp16_skips_a_step_with_inf_gradients_and_the_scheduler_waits_for_it():
    model, optimizer = model_and_optimizer()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    accelerator = Accelerator(cpu=True, mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024)])
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    assert accelerator.scaler.get_scale() == 1024
    before = weights(model)
    accelerator.backward(model(torch.full((2, 4), float("inf"))).sum())
    optimizer.step()
    scheduler.step()
    assert optimizer.step_was_skipped and accelerator.optimizer_step_was_skipped
    assert all(torch.equal(value, before[name]) for name, value in weights(model).items())
    assert scheduler.get_last_lr() == [0.05]


def test_clip_grad_norm_unscales_fp16_gradients_first_and_returns_the_norm():
    model, optimizer = model_and_optimizer()
    reference = model_and_optimizer()[0].eval()
    x, y = data()[:8]
    torch.nn.functional.mse_loss(reference(x), y).backward()
    expected = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.01)
    accelerator = Accelerator(cpu=True, mixed_precision="fp16")
    model, optimizer = accelerator.prepare(model, optimizer)
    model.eval()
    with accelerator.autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    norm = accelerator.clip_grad_norm_(model.parameters(), 0.01)
    torch.testing.assert_close(norm, expected, rtol=2e-2, atol=0)  # fp16 forward, unscaled gradients
    total = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    torch.testing.assert_close(total, torch.tensor(0.01), rtol=1e-3, atol=0)


def test_the_launchers_settings_apply_where_the_arguments_are_left_out(monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4")
    accelerator = Accelerator(cpu=True)
    assert accelerator.mixed_precision == "bf16" and accelerator.gradient_accumulation_steps == 4
    assert Accelerator(cpu=True, mixed_precision="no").mixed_precision == "no"  # an argument wins ...
    assert Accelerator(cpu=True, gradient_accumulation_steps=2).gradient_accumulation_steps == 4  # ... not here
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
    monkeypatch.delenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS")
    assert Accelerator().device == torch.device("cpu")
    plugin = GradientAccumulationPlugin(num_steps=3, sync_with_dataloader=False)
    accelerator = Accelerator(gradient_accumulation_plugin=plugin)
    assert accelerator.gradient_accumulation_steps == 3 and not accelerator.gradient_state.sync_with_dataloader


@pytest.mark.parametrize(("arguments", "match"), [
    ({"mixed_precision": "fp8"}, r"mixed_precision='fp8' \(type str\) is not supported; accepted 'no', 'fp16'"),
    ({"mixed_precision": "half"}, "mixed_precision='half'"),
    ({"gradient_accumulation_steps": 0}, r"gradient_accumulation_steps=0 \(type int\) must be a positive int"),
    ({"deepspeed_plugin": object()}, r"deepspeed_plugin=object\(...\)\): accepted a DeepSpeedPlugin"),
    ({"split_batches": True}, "split_batches=True"),
    ({"log_with": "aim"}, r"log_with='aim'\) \(Accelerate has it"),
    ({"kwargs_handlers": [object()]}, "accepted DistributedDataParallelKwargs"),
    ({"kwargs_handlers": [DistributedDataParallelKwargs(), DistributedDataParallelKwargs()]}, "two Distributed"),
    ({"gradient_accumulation_steps": 2, "gradient_accumulation_plugin": GradientAccumulationPlugin(2)}, "not both"),
])
def test_what_cannot_work_is_refused_by_name(arguments, match):
    with pytest.raises(MisconfigurationError, match=match):
        Accelerator(cpu=True, **arguments)


def test_a_bad_launcher_setting_names_the_variable(monkeypatch):
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "two")
    with pytest.raises(MisconfigurationError, match="ACCELERATE_GRADIENT_ACCUMULATION_STEPS='two'"):
        Accelerator(cpu=True)


def test_process_helpers_on_one_process(capsys):
    accelerator = Accelerator(cpu=True)
    calls = []
    accelerator.on_main_process(lambda: calls.append("main"))()
    accelerator.on_process(process_index=3)(lambda: calls.append("any"))()  # one process: runs everywhere
    accelerator.on_last_process(lambda: calls.append("last"))()
    assert calls == ["main", "any", "last"]
    with accelerator.split_between_processes(list(range(5))) as mine:
        assert mine == [0, 1, 2, 3, 4]
    with accelerator.main_process_first():
        accelerator.print("first")
    accelerator.wait_for_everyone()
    assert capsys.readouterr().out == "first\n"
    assert torch.equal(accelerator.gather(torch.tensor(2.0)), torch.tensor(2.0))
    reduced = accelerator.reduce({"a": torch.tensor(3.0)}, reduction="mean")
    assert reduced["a"].item() == 3.0
    accelerator.set_trigger()
    assert accelerator.check_trigger() and not accelerator.check_trigger()
    with pytest.raises(TypeError, match="takes tensors"):
        accelerator.gather(["text"])
    assert accelerator.gather_for_metrics(["a", "b"]) == ["a", "b"]


def test_free_memory_forgets_what_was_prepared():
    accelerator = Accelerator(cpu=True)
    model, optimizer = accelerator.prepare(*model_and_optimizer())
    model, optimizer = accelerator.free_memory(model, optimizer)
    assert model is None and optimizer is None and accelerator._models == [] and accelerator._optimizers == []


def test_a_plateau_scheduler_waits_for_the_synced_batches_too():
    model, optimizer = model_and_optimizer()
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.5)
    model, optimizer, plateau = accelerator.prepare(model, optimizer, plateau)
    x, y = data()[:4]
    for _ in range(4):
        with accelerator.accumulate(model):
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            optimizer.step()
            plateau.step(1.0)  # never better: halves the rate on each step it takes
            optimizer.zero_grad()
    assert optimizer.param_groups[0]["lr"] == 0.05 * 0.5  # the first synced step sets the best; the second halves


def test_the_launchers_compile_flags_reach_the_accelerator_or_are_refused(monkeypatch):
    from framework.accelerate.utils import TorchDynamoPlugin

    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "eager")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_FULLGRAPH", "true")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_DYNAMIC", "true")  # was read by no one
    assert Accelerator(cpu=True)._runtime.compile_options == {"backend": "eager", "fullgraph": True, "dynamic": True}
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "true")  # was silently dropped
    with pytest.raises(MisconfigurationError, match="--dynamo_use_regional_compilation .*is not supported"):
        Accelerator(cpu=True)
    monkeypatch.delenv("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION")
    with pytest.raises(MisconfigurationError, match=r"TorchDynamoPlugin\(use_regional_compilation=True\)"):
        Accelerator(cpu=True, dynamo_plugin=TorchDynamoPlugin(backend="eager", use_regional_compilation=True))
