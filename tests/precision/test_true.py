"""True-precision modes: the module, its inputs and its optimizer state in one dtype."""

from __future__ import annotations

import pytest
import torch

import framework
from framework.errors import MisconfigurationError
from framework.precision import Float64True
from tests.helpers import quiet_trainer
from tests.precision.models import Classifier, blob_loader, blobs, fp32_loss

MODES = [("bf16-true", torch.bfloat16), ("16-true", torch.float16), ("64-true", torch.float64)]


@pytest.mark.parametrize(("precision", "dtype"), MODES)
def test_parameters_buffers_inputs_and_optimizer_state_take_the_dtype(precision, dtype):
    model = Classifier(batch_norm=True)
    model.configure_optimizers = lambda: torch.optim.Adam(model.parameters(), lr=1e-3)
    trainer = quiet_trainer(max_steps=2, precision=precision)
    trainer.fit(model, blob_loader())

    assert all(p.dtype == dtype for p in model.parameters())
    batch_norm = model.net[1]
    assert batch_norm.running_mean.dtype == dtype
    assert batch_norm.num_batches_tracked.dtype == torch.int64  # integer buffers are kept
    for state in trainer.optimizers[0].state.values():
        assert state["exp_avg"].dtype == dtype
    for seen in model.seen:
        assert seen["input_dtype"] == dtype
        assert seen["label_dtype"] == torch.int64  # integer labels are kept
        assert seen["default_dtype"] == dtype and seen["new_tensor_dtype"] == dtype
        assert not seen["autocast"]
    assert torch.get_default_dtype() == torch.float32  # restored after each step


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_evaluation_casts_inputs_the_same_way(stage):
    model = Classifier()
    trainer = quiet_trainer(precision="bf16-true")
    result = getattr(trainer, stage)(model, blob_loader(64))
    assert model.seen and all(seen["input_dtype"] == torch.bfloat16 for seen in model.seen)
    if stage == "predict":
        assert result[0].dtype == torch.bfloat16
    else:
        assert isinstance(next(iter(result[0].values())), float)  # logged bf16 values come back as floats


class FloatBatchNorm(Classifier):
    """Puts its BatchNorm back to fp32 after the precision converted the module, as some recipes do."""

    def on_fit_start(self):
        self.net[1].float()


@pytest.mark.parametrize("cls", [Classifier, FloatBatchNorm], ids=["bf16-batchnorm", "fp32-batchnorm"])
def test_bf16_true_runs_with_batch_norm(cls):
    model = cls(batch_norm=True)
    trainer = quiet_trainer(max_epochs=3, precision="bf16-true")
    trainer.fit(model, blob_loader())
    assert trainer.global_step == 24
    expected = torch.float32 if cls is FloatBatchNorm else torch.bfloat16
    assert model.net[1].weight.dtype == expected
    assert fp32_loss(model, blobs()) < 0.5  # it learned (the start is about 1.1)


def test_64_true_matches_fp32_training():
    runs = {}
    for precision in ("32-true", "64-true"):
        model = Classifier()
        quiet_trainer(max_epochs=3, precision=precision).fit(model, blob_loader())
        runs[precision] = fp32_loss(model, blobs())
    # Same steps, only rounding differs: fp32 rounding over 24 steps stays far below 1e-4.
    assert runs["64-true"] == pytest.approx(runs["32-true"], rel=1e-4)


def test_runtime_casts_inputs_for_a_hand_written_loop():
    runtime = framework.Runtime(accelerator="cpu", precision="64-true")
    model = runtime.setup(torch.nn.Linear(3, 1))
    x, labels = runtime.to_device((torch.ones(2, 3), torch.tensor([0, 1])))
    assert x.dtype == torch.float64 and labels.dtype == torch.int64
    with runtime.autocast():
        assert model(x).dtype == torch.float64


def test_float64_is_refused_on_mps():
    with pytest.raises(MisconfigurationError, match=r"precision='64-true' cannot run on mps.*accelerator='cpu'"):
        Float64True().connect(torch.device("mps"))
