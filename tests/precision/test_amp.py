"""Mixed precision on CPU: autocast, fp32 state, loss scaling, skipped steps, clipping, checkpoints."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import framework
from framework.errors import MisconfigurationError
from framework.precision import BFloat16Mixed, Float16Mixed, Precision
from tests.helpers import quiet_trainer
from tests.precision.models import Classifier, blob_loader, blobs, fp32_loss

EPOCHS = 10  # 80 SGD steps: the fp32 run's loss falls from 1.1 to 0.025


def trained(precision, **trainer_kwargs) -> tuple[Classifier, framework.Trainer]:
    model = Classifier()
    trainer = quiet_trainer(max_epochs=EPOCHS, precision=precision, **trainer_kwargs)
    trainer.fit(model, blob_loader())
    return model, trainer


@pytest.fixture(scope="module")
def fp32_reference() -> float:
    return fp32_loss(trained("32-true")[0], blobs())


# Mixed modes keep fp32 weights and only compute matmuls in low precision, so the loss after the
# same 80 steps differs from fp32's by rounding alone (measured: under 0.3 %); 2 % leaves room for
# other CPUs' kernels. bf16-true keeps the weights themselves in bf16 (8 significant bits): an SGD
# update smaller than 1/256 of a weight rounds away, so training is slower (measured: 6 % higher
# loss after 80 steps); 15 % still fails a run that did not train (the start is 1.1, 40x higher).
@pytest.mark.parametrize(("precision", "tolerance"), [("16-mixed", 0.02), ("bf16-mixed", 0.02), ("bf16-true", 0.15)])
def test_low_precision_training_reaches_the_fp32_loss(fp32_reference, precision, tolerance):
    model, _ = trained(precision)
    loss = fp32_loss(model, blobs())
    assert loss == pytest.approx(fp32_reference, rel=tolerance)
    assert fp32_reference < 0.05  # the reference itself trained


@pytest.mark.parametrize(("precision", "dtype"), [("16-mixed", torch.float16), ("bf16-mixed", torch.bfloat16)])
def test_mixed_modes_autocast_the_forward_and_keep_fp32_state(precision, dtype):
    model = Classifier()
    model.configure_optimizers = lambda: torch.optim.Adam(model.parameters(), lr=1e-3)
    trainer = quiet_trainer(max_steps=3, precision=precision)
    trainer.fit(model, blob_loader())
    for seen in model.seen:
        assert seen["autocast"]
        assert seen["input_dtype"] == torch.float32
        assert seen["logits_dtype"] == dtype  # the Linear ran in low precision
        assert seen["loss_dtype"] == torch.float32  # cross_entropy autocasts to fp32, inside the region
    assert all(p.dtype == torch.float32 for p in model.parameters())
    for state in trainer.optimizers[0].state.values():
        assert state["exp_avg"].dtype == torch.float32
        assert state["exp_avg_sq"].dtype == torch.float32
    assert not torch.is_autocast_enabled("cpu")  # the region closed


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_evaluation_runs_under_the_same_autocast(stage):
    model = Classifier()
    trainer = quiet_trainer(precision="bf16-mixed")
    getattr(trainer, stage)(model, blob_loader(64))
    assert model.seen and all(seen["autocast"] and seen["logits_dtype"] == torch.bfloat16 for seen in model.seen)


class Overflowing(Classifier):
    """Multiplies the loss by 1e30 on training batch ``overflow_at``: its fp16 gradients become inf."""

    def __init__(self, overflow_at: int, fused: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.overflow_at = overflow_at
        self.fused = fused
        self.weights_after: list[torch.Tensor] = []
        self.lrs: list[float] = []

    def training_step(self, batch, batch_idx):
        loss = self._step(batch)
        return loss * 1e30 if batch_idx == self.overflow_at else loss

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.weights_after.append(self.net[0].weight.detach().clone())
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1, fused=self.fused or None)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


@pytest.mark.parametrize("fused", [False, True], ids=["skipped-by-the-scaler", "fused-skips-itself"])
def test_an_overflowing_step_is_skipped_and_the_scheduler_waits(fused):
    model = Overflowing(overflow_at=2, fused=fused)
    precision = Float16Mixed(torch.amp.GradScaler("cpu", init_scale=1024.0))
    trainer = quiet_trainer(max_steps=5, precision=precision)
    trainer.fit(model, blob_loader())

    weights = model.weights_after
    assert torch.equal(weights[2], weights[1])  # the overflowing step left the weights alone
    assert not torch.equal(weights[3], weights[2])  # and training went on
    assert all(torch.isfinite(w).all() for w in weights)
    # The scheduler halves the LR after each real step only: 0.1 -> 0.05 -> 0.025, then no change.
    assert model.lrs == pytest.approx([0.05, 0.025, 0.025, 0.0125, 0.00625])
    assert precision.scaler.get_scale() == 512.0  # halved once, never grown (growth_interval is 2000)
    assert trainer.global_step == 5  # the skipped step counts, as in Lightning


def test_the_optimizer_step_reports_a_skip():
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    precision = Float16Mixed(torch.amp.GradScaler("cpu", init_scale=256.0))
    runtime = framework.Runtime(accelerator="cpu", precision=precision)
    model, optimizer = runtime.setup(model, optimizer)
    with runtime.autocast():
        loss = model(torch.ones(4, 2)).sum()
    runtime.backward(loss * float("inf"))
    assert runtime.optimizer_step(optimizer) is False
    optimizer.zero_grad()
    with runtime.autocast():
        loss = model(torch.ones(4, 2)).sum()
    runtime.backward(loss)
    assert runtime.optimizer_step(optimizer) is True


class GradientRecorder(Classifier):
    """Keeps, at the last optimizer step, the weights before it and the gradients the hook saw."""

    def on_before_optimizer_step(self, optimizer):
        self.grads = [p.grad.detach().clone() for p in self.parameters()]
        self.before = [p.detach().clone() for p in self.parameters()]

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.after = [p.detach().clone() for p in self.parameters()]


@pytest.mark.parametrize("algorithm", ["norm", "value"])
def test_clipping_under_16_mixed_clips_the_unscaled_gradients(algorithm):
    model = GradientRecorder(lr=0.5)
    precision = Float16Mixed(torch.amp.GradScaler("cpu", init_scale=2.0**12))
    trainer = quiet_trainer(max_steps=1, precision=precision, gradient_clip_val=0.05,
                            gradient_clip_algorithm=algorithm)
    trainer.fit(model, blob_loader())

    # What the hook saw is the true gradient: the same step without scaling, computed by hand.
    reference = Classifier()
    x, y = next(iter(blob_loader()))
    with torch.autocast("cpu", dtype=torch.float16):
        loss = nn.functional.cross_entropy(reference(x), y)
    loss.backward()
    for seen, expected in zip(model.grads, (p.grad for p in reference.parameters()), strict=True):
        torch.testing.assert_close(seen, expected, rtol=1e-2, atol=1e-4)

    holders = [nn.Parameter(torch.zeros_like(g)) for g in model.grads]
    for holder, grad in zip(holders, model.grads, strict=True):
        holder.grad = grad.clone()
    if algorithm == "norm":
        norm = torch.nn.utils.clip_grad_norm_(holders, 0.05)
        assert norm > 0.05  # the clip did something
    else:
        torch.nn.utils.clip_grad_value_(holders, 0.05)
        assert any((g.abs() > 0.05).any() for g in model.grads)
    for before, holder, after in zip(model.before, holders, model.after, strict=True):
        torch.testing.assert_close(after, before - 0.5 * holder.grad)


class ManualOverflow(Classifier):
    """Manual optimization: manual_backward, clip_gradients and step, overflowing on batch 1."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.weights_after: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        loss = self._step(batch)
        self.manual_backward(loss * 1e30 if batch_idx == 1 else loss)
        self.clip_gradients(optimizer, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
        optimizer.step()
        optimizer.zero_grad()
        self.weights_after.append(self.net[0].weight.detach().clone())


def test_manual_optimization_goes_through_the_scaler():
    model = ManualOverflow()
    precision = Float16Mixed(torch.amp.GradScaler("cpu", init_scale=1024.0))
    trainer = quiet_trainer(max_steps=3, precision=precision)
    trainer.fit(model, blob_loader())
    weights = model.weights_after
    assert not torch.equal(weights[0], Classifier().net[0].weight)
    assert torch.equal(weights[1], weights[0])  # skipped
    assert not torch.equal(weights[2], weights[1])
    assert precision.scaler.get_scale() == 512.0


def test_with_accumulation_the_scale_updates_once_per_optimizer_step():
    precision = Float16Mixed(torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=3))
    trainer = quiet_trainer(max_epochs=1, precision=precision, accumulate_grad_batches=4)
    trainer.fit(Classifier(), blob_loader())  # 8 batches: 2 optimizer steps
    assert trainer.global_step == 2
    assert precision.state_dict()["_growth_tracker"] == 2  # one update per step, not per batch
    assert precision.scaler.get_scale() == 1024.0


def test_the_scale_survives_a_checkpoint_round_trip(tmp_path):
    model = Overflowing(overflow_at=1)
    trainer = quiet_trainer(max_steps=3, precision=Float16Mixed(torch.amp.GradScaler("cpu", init_scale=256.0)))
    trainer.fit(model, blob_loader())
    path = tmp_path / "fp16.ckpt"
    trainer.save_checkpoint(path)
    saved = torch.load(path, weights_only=True)
    assert saved["precision"]["scale"] == 128.0

    resumed = quiet_trainer(max_steps=4, precision="16-mixed")
    assert resumed.runtime.precision.scaler.get_scale() == 65536.0  # the default, before loading
    resumed.fit(Overflowing(overflow_at=-1), blob_loader(), ckpt_path=path)
    assert resumed.runtime.precision.scaler.get_scale() == 128.0


def test_16_mixed_refuses_lbfgs_with_a_reason():
    model = Classifier()
    model.configure_optimizers = lambda: torch.optim.LBFGS(model.parameters())
    with pytest.raises(MisconfigurationError, match=r"16-mixed.*LBFGS.*bf16-mixed"):
        quiet_trainer(max_steps=1, precision="16-mixed").fit(model, blob_loader())


@pytest.mark.parametrize(("precision", "device", "advice"), [
    (Float16Mixed(), "mps", "GradScaler has no 'mps' support"),
    (BFloat16Mixed(), "xla", "autocast has no 'xla' support"),
])
def test_a_device_without_the_mode_is_refused_when_connected(precision, device, advice):
    with pytest.raises(MisconfigurationError, match=rf"precision='{precision.name}' cannot run on {device}.*{advice}"):
        precision.connect(torch.device(device))


def test_base_precision_changes_nothing():
    precision = Precision()
    precision.connect(torch.device("cpu"))
    model = nn.Linear(2, 1)
    assert precision.convert_module(model) is model
    batch = (torch.ones(2), 3)
    assert precision.convert_input(batch) is batch
    with precision.autocast():
        assert not torch.is_autocast_enabled("cpu")
    assert precision.state_dict() == {}


def test_a_plateau_scheduler_stepping_per_step_waits_for_a_skipped_step():
    class PlateauEachStep(Overflowing):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            self.plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
            return {"optimizer": optimizer,
                    "lr_scheduler": {"scheduler": self.plateau, "interval": "step", "monitor": "train_loss"}}

    model = PlateauEachStep(overflow_at=2)
    precision = Float16Mixed(torch.amp.GradScaler("cpu", init_scale=1024.0))
    quiet_trainer(max_steps=5, precision=precision).fit(model, blob_loader())
    assert model.plateau.last_epoch == 4  # five steps, one skipped: it never saw the 1e30 loss
    assert model.plateau.best < 10


class SharedBackward(Classifier):
    """Manual optimization: one backward over the whole net, one optimizer per layer."""

    def __init__(self, overflow_at: int = -1) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.overflow_at = overflow_at
        self.grads: list[tuple[torch.Tensor, torch.Tensor]] = []

    def training_step(self, batch, batch_idx):
        first, second = self.optimizers()
        loss = self._step(batch)
        self.manual_backward(loss * 1e30 if batch_idx == self.overflow_at else loss)
        self.clip_gradients(first, gradient_clip_val=1e9)  # unscales the first optimizer's gradients only
        first.step()
        self.clip_gradients(second, gradient_clip_val=1e9)
        self.grads.append((self.net[0].weight.grad.clone(), self.net[2].weight.grad.clone()))
        second.step()
        first.zero_grad()
        second.zero_grad()

    def configure_optimizers(self):
        return (torch.optim.SGD(self.net[0].parameters(), lr=0.1), torch.optim.SGD(self.net[2].parameters(), lr=0.1))


def test_two_optimizers_sharing_one_backward_see_the_same_scale_and_it_moves_once():
    # growth_interval=1 would double the scale after the first optimizer's step if it were updated per step
    precision = Float16Mixed(torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=1))
    model = SharedBackward()
    quiet_trainer(max_steps=2, precision=precision).fit(model, blob_loader())
    reference = Classifier()
    x, y = next(iter(blob_loader()))
    with torch.autocast("cpu", dtype=torch.float16):
        nn.functional.cross_entropy(reference(x), y).backward()
    for seen, expected in zip(model.grads[0], (reference.net[0].weight.grad, reference.net[2].weight.grad),
                              strict=True):
        torch.testing.assert_close(seen, expected, rtol=1e-2, atol=1e-4)
    assert precision.scaler.get_scale() == 512.0  # one batch (two optimizer steps), one update

    precision = Float16Mixed(torch.amp.GradScaler("cpu", init_scale=1024.0))
    quiet_trainer(max_steps=2, precision=precision).fit(SharedBackward(overflow_at=0), blob_loader())
    assert precision.scaler.get_scale() == 512.0  # one overflowing batch halves the scale once


@pytest.mark.parametrize("where", ["manual", "runtime"])
def test_clipping_outside_the_trainer_loop_clips_the_unscaled_gradients(where):
    x, y = next(iter(blob_loader()))
    reference = Classifier()
    with torch.autocast("cpu", dtype=torch.float16):
        nn.functional.cross_entropy(reference(x), y).backward()
    true_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.05)
    assert true_norm > 0.05

    precision = Float16Mixed(torch.amp.GradScaler("cpu", init_scale=2.0**12))
    if where == "manual":
        class ClipsByHand(Classifier):
            def __init__(self):
                super().__init__()
                self.automatic_optimization = False

            def training_step(self, batch, batch_idx):
                self.manual_backward(self._step(batch))
                self.clip_gradients(self.optimizers(), gradient_clip_val=0.05, gradient_clip_algorithm="norm")
                self.clipped = [p.grad.clone() for p in self.parameters()]

        model = ClipsByHand()
        quiet_trainer(max_epochs=1, limit_train_batches=1, precision=precision).fit(model, blob_loader())
        clipped = model.clipped
    else:
        runtime = framework.Runtime(accelerator="cpu", precision=precision)
        model = Classifier()
        model, optimizer = runtime.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
        with runtime.autocast():
            loss = nn.functional.cross_entropy(model(x), y)
        runtime.backward(loss)
        norm = runtime.clip_gradients(model, optimizer, max_norm=0.05)
        torch.testing.assert_close(norm, true_norm, rtol=1e-2, atol=1e-4)  # the norm of the true gradients
        clipped = [p.grad.clone() for p in model.parameters()]
    for seen, expected in zip(clipped, (p.grad for p in reference.parameters()), strict=True):
        torch.testing.assert_close(seen, expected, rtol=1e-2, atol=1e-4)
