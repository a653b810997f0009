"""The step methods under torch.compile: compile= and fit(torch.compile(model)), self.log inside compiled
steps, no recompiling per step, and the Module inside a torch.compile wrapper being the one trained."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch import nn
from torch._dynamo.utils import counters

import framework
from framework.runtime import CompileError
from tests.helpers import CountingBackend, quiet_trainer
from tests.precision.models import blob_loader

STAGES = ("training", "validation", "test", "predict")


class Steps(framework.Module):
    """Notes in each step whether it runs compiled, and logs on every step as a typical Module does."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
        self.compiled_in = dict.fromkeys(STAGES, False)

    def forward(self, x):
        return self.net(x)

    def _loss(self, batch):
        x, y = batch
        logits = self(x)
        return nn.functional.cross_entropy(logits, y), (logits.argmax(1) == y).float().mean()

    def training_step(self, batch, batch_idx):
        self.compiled_in["training"] = torch.compiler.is_compiling()
        loss, accuracy = self._loss(batch)
        self.log("train_loss", loss, prog_bar=True)
        self.log_dict({"train_acc": accuracy, "lr": 0.1}, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.compiled_in["validation"] = torch.compiler.is_compiling()
        loss, accuracy = self._loss(batch)
        self.log("val_loss", loss)
        self.log("val_acc", accuracy, reduce_fx="max")

    def test_step(self, batch, batch_idx):
        self.compiled_in["test"] = torch.compiler.is_compiling()
        self.log("test_loss", self._loss(batch)[0])

    def predict_step(self, batch, batch_idx):
        self.compiled_in["predict"] = torch.compiler.is_compiling()
        return self(batch[0]).softmax(dim=1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()  # graphs compiled by earlier tests would be reused, and not counted
    counters.clear()
    yield
    torch._dynamo.reset()


def run_every_stage(model, trainer) -> dict:
    trainer.fit(model, blob_loader(), blob_loader(64))
    metrics = dict(trainer.callback_metrics)
    metrics.update(trainer.validate(model, blob_loader(64), verbose=False)[0])
    metrics.update(trainer.test(model, blob_loader(64), verbose=False)[0])
    predictions = torch.cat(trainer.predict(model, blob_loader(64)))
    return {"metrics": metrics, "predictions": predictions, "weights": model.state_dict()}


def test_every_step_runs_compiled_and_what_it_logs_equals_the_eager_run():
    eager_model = Steps()
    eager = run_every_stage(eager_model, quiet_trainer(max_epochs=2))
    assert not any(eager_model.compiled_in.values())

    backend = CountingBackend()
    model = Steps()
    compiled = run_every_stage(model, quiet_trainer(max_epochs=2, compile={"backend": backend}))
    assert model.compiled_in == dict.fromkeys(STAGES, True)
    assert backend.graphs >= 4
    assert sorted(compiled["metrics"]) == sorted(eager["metrics"])
    for name, value in eager["metrics"].items():
        assert float(compiled["metrics"][name]) == pytest.approx(float(value), rel=1e-5), name
    torch.testing.assert_close(compiled["predictions"], eager["predictions"])
    assert list(compiled["weights"]) == ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"]
    # the forward a user calls stays compiled, and inside a step it is part of the step's graph
    graphs = backend.graphs
    model(torch.ones(2, 8))
    assert backend.graphs == graphs + 1


class EpochGraphs(framework.Callback):
    """dynamo's count of the graphs it compiled, at the end of each training epoch."""

    def __init__(self) -> None:
        self.at_epoch_end: list[int] = []

    def on_train_epoch_end(self, trainer, module):
        self.at_epoch_end.append(counters["stats"]["unique_graphs"])


def test_logging_in_compiled_steps_neither_recompiles_them_nor_breaks_their_graphs(tmp_path):
    graphs = EpochGraphs()
    trainer = quiet_trainer(max_epochs=4, compile={"backend": "eager"}, callbacks=[graphs],
                            logger=framework.loggers.CSVLogger(tmp_path), log_every_n_steps=3)
    trainer.fit(Steps(), blob_loader(), blob_loader(64))
    # Everything compiles in the first epoch (sanity check, training, validation); no later batch compiles again.
    assert graphs.at_epoch_end[0] > 0
    assert graphs.at_epoch_end == [graphs.at_epoch_end[0]] * 4
    assert not counters["graph_break"], dict(counters["graph_break"])
    logged = (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text().splitlines()
    header = logged[0].split(",")
    assert {"train_loss", "train_acc_step", "train_acc_epoch", "val_loss", "val_acc", "lr_step"} <= set(header)


def test_fit_takes_a_module_compiled_by_torch_compile_and_trains_the_module_inside(tmp_path):
    backend = CountingBackend()
    model = Steps()
    compiled = torch.compile(model, backend=backend)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(compiled, blob_loader(), blob_loader(64))
    assert trainer.lightning_module is model
    assert model.compiled_in["training"] and model.compiled_in["validation"]
    assert backend.graphs >= 2  # the options given to torch.compile (its backend) compiled the steps
    assert any(not torch.equal(before[name], tensor) for name, tensor in model.state_dict().items())
    trainer.save_checkpoint(tmp_path / "compiled.ckpt")
    keys = list(torch.load(tmp_path / "compiled.ckpt", weights_only=True)["state_dict"])
    assert keys == ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"]

    # The same compiled object: fitted again (by this Trainer and by another), evaluated, and still callable.
    trainer.fit(compiled, blob_loader())
    quiet_trainer(max_epochs=1).fit(compiled, blob_loader())
    assert trainer.validate(compiled, blob_loader(64), verbose=False)[0]["val_loss"] > 0
    assert trainer.test(compiled, blob_loader(64), verbose=False)[0]["test_loss"] > 0
    predictions = torch.cat(trainer.predict(compiled, blob_loader(64)))
    assert model.compiled_in == dict.fromkeys(STAGES, True)
    torch.testing.assert_close(predictions[:2], compiled(blob_loader(64).dataset[:2][0]).softmax(dim=1))
    assert not hasattr(model, "_compiled_call_impl") or model._compiled_call_impl is None  # left as given


def test_a_compiled_model_that_is_no_module_is_refused_with_what_it_holds():
    expected = r"torch.compile\(\.\.\.\)\) compiled Linear\(.*\(type Linear\); the model inside must subclass"
    with pytest.raises(TypeError, match=expected):
        quiet_trainer(max_epochs=1).fit(torch.compile(nn.Linear(2, 2)), blob_loader())


def test_runtime_compiles_the_step_methods_a_hand_written_loop_calls():
    backend = CountingBackend()
    runtime = framework.Runtime(accelerator="cpu", compile={"backend": backend})
    module = Steps()
    model = runtime.setup(module)
    x, y = blob_loader().dataset[:4]
    model.mark_forward_method("validation_step")
    with pytest.warns(UserWarning, match="outside a Trainer loop") as dropped:  # as in an eager step
        model.training_step((x, y), 0)
        model.validation_step((x, y), 0)
    assert len(dropped) == 5 and module._logged_while_compiling == []  # dropped, not left unrecorded
    assert module.compiled_in["training"] and module.compiled_in["validation"]
    assert backend.graphs >= 2  # each step (split where the dropped logs warn)
    assert model.training_step is model.training_step  # made once, not compiled again on each access


def failing_backend(graph_module, example_inputs):
    raise RuntimeError("backend exploded on purpose")


def test_a_compile_failure_names_the_step_and_the_cause():
    trainer = quiet_trainer(max_steps=1, compile={"backend": failing_backend})
    expected = r"torch.compile failed on Steps.training_step: RuntimeError: backend exploded on purpose\. Run once"
    with pytest.raises(CompileError, match=expected):
        trainer.fit(Steps(), blob_loader())


class LogsCompiling(Steps):
    def training_step(self, batch, batch_idx):
        self.log("compiling", float(torch.compiler.is_compiling()))
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("how", ["compile=", "torch.compile(model)"])
def test_spawned_ranks_compile_their_steps_as_the_caller_asked(how):
    from framework.strategies import DDPStrategy

    model = LogsCompiling()
    trainer = quiet_trainer(max_epochs=1, devices=2, strategy=DDPStrategy(start_method="spawn"),
                            compile={"backend": "eager"} if how == "compile=" else False)
    trainer.validate(model, blob_loader(64), verbose=False)  # what this process set up must still pickle
    trainer.fit(model if how == "compile=" else torch.compile(model, backend="eager"), blob_loader())
    assert trainer.callback_metrics["compiling"] == 1


def test_what_a_step_compiled_by_the_user_logs_is_recorded_too():
    class CompilesItsOwnStep(Steps):
        def __init__(self) -> None:
            super().__init__()
            self.training_step = torch.compile(self.training_step, backend="eager")

    model = CompilesItsOwnStep()
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(model, blob_loader())
    assert model.compiled_in["training"]
    assert {"train_loss", "train_acc_step", "train_acc_epoch", "lr_step"} <= set(trainer.callback_metrics)
    assert model._logged_while_compiling == []
