"""Module: hyperparameters, load_from_checkpoint, what it reads from the Trainer, logging and optimizer helpers."""

from __future__ import annotations

import argparse
import dataclasses
import warnings
from enum import Enum
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

import framework
from framework import MisconfigurationError
from framework.io.checkpoint_storage import load_checkpoint
from tests.helpers import Regressor, loader, quiet_trainer, regression_data


def _assert_weights(actual: dict, expected: dict) -> None:
    assert set(actual) == set(expected)
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], msg=lambda m, name=name: f"{name}: {m}")


def _fit_and_save(model: framework.Module, path, features: int = 4, **trainer_kwargs) -> framework.Trainer:
    data = DataLoader(regression_data(32, features=features), batch_size=8)
    trainer = quiet_trainer(max_epochs=1, **trainer_kwargs)
    trainer.fit(model, data)
    trainer.save_checkpoint(path)
    return trainer


# -- save_hyperparameters --------------------------------------------------------------------------------------------

def test_all_arguments_are_saved_keyword_or_positional():
    assert Regressor(lr=0.2, features=3).hparams == {"lr": 0.2, "features": 3}
    assert Regressor(0.3, 5).hparams == {"lr": 0.3, "features": 5}
    assert Regressor().hparams == {"lr": 0.05, "features": 4}  # defaults count too


class NotCalledSelf(framework.Module):
    def __init__(this, lr: float = 0.1, hidden: int = 8) -> None:
        super().__init__()
        this.save_hyperparameters()


def test_arguments_are_saved_whatever_the_instance_argument_is_called():
    assert NotCalledSelf(hidden=3).hparams == {"lr": 0.1, "hidden": 3}  # as in Lightning


def test_hparams_attribute_access():
    model = Regressor(lr=0.2)
    assert model.hparams.lr == 0.2 and model.hparams["lr"] == 0.2
    assert isinstance(model.hparams, dict)
    with pytest.raises(AttributeError, match="momentum"):
        model.hparams.momentum


class Subset(framework.Module):
    def __init__(self, lr: float = 0.1, hidden: int = 8, seed: int = 3) -> None:
        super().__init__()
        self.save_hyperparameters("lr", "hidden")
        self.net = nn.Linear(4, 1)


def test_named_subset():
    assert Subset(lr=0.5).hparams == {"lr": 0.5, "hidden": 8}


def test_naming_an_unknown_argument_raises():
    class Typo(framework.Module):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters("learning_rate")

    with pytest.raises(MisconfigurationError, match="learning_rate"):
        Typo()


def test_ignore_one_name_or_several():
    class Ignoring(framework.Module):
        def __init__(self, lr=0.1, backbone=None, loss_fn=None, depth=2) -> None:
            super().__init__()
            self.save_hyperparameters(ignore=["backbone", "loss_fn"])

    assert Ignoring(backbone=nn.Linear(1, 1), loss_fn=nn.MSELoss()).hparams == {"lr": 0.1, "depth": 2}

    class IgnoringStr(framework.Module):
        def __init__(self, lr=0.1, backbone=None) -> None:
            super().__init__()
            self.save_hyperparameters(ignore="backbone")

    assert IgnoringStr().hparams == {"lr": 0.1}


def test_dict_or_namespace_argument():
    class FromDict(framework.Module):
        def __init__(self, config: dict) -> None:
            super().__init__()
            self.save_hyperparameters(config)

    config = {"lr": 0.01, "layers": [4, 8, 1], "optim": {"name": "adam"}}
    model = FromDict(config)
    assert model.hparams == config
    assert model.hparams.layers == [4, 8, 1]

    class FromNamespace(framework.Module):
        def __init__(self, args) -> None:
            super().__init__()
            self.save_hyperparameters(args)

    assert FromNamespace(argparse.Namespace(lr=0.2, depth=3)).hparams == {"lr": 0.2, "depth": 3}


class Base(framework.Module):
    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Linear(4, hidden)


class Child(Base):
    def __init__(self, width: int = 4, dropout: float = 0.1) -> None:
        super().__init__(hidden=width * 2)
        self.dropout = nn.Dropout(dropout)


def test_subclass_arguments_are_saved_by_the_base_class_call():
    model = Child(width=5, dropout=0.25)
    # as in Lightning: every __init__ on the stack, the subclass's values winning; the base's own
    # ``hidden`` (computed by Child) comes along
    assert model.hparams == {"width": 5, "dropout": 0.25, "hidden": 10}
    assert model.net.out_features == 10


class ChildFit(Child):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x).sum(dim=1, keepdim=True), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_subclass_load_from_checkpoint(tmp_path):
    path = tmp_path / "child.ckpt"
    trained = ChildFit(width=5, dropout=0.25)
    _fit_and_save(trained, path)
    loaded = ChildFit.load_from_checkpoint(path)
    assert loaded.net.out_features == 10 and loaded.dropout.p == 0.25
    _assert_weights(loaded.state_dict(), trained.state_dict())


def test_subclass_that_passes_its_argument_through():
    class Same(Base):
        def __init__(self, hidden: int = 16, extra: str = "x") -> None:
            super().__init__(hidden)

    assert Same(hidden=12).hparams == {"hidden": 12, "extra": "x"}


def test_var_keyword_arguments_are_flattened():
    class Kw(framework.Module):
        def __init__(self, lr: float = 0.1, **kwargs) -> None:
            super().__init__()
            self.save_hyperparameters()

    assert Kw(lr=0.3, depth=2, act="relu").hparams == {"lr": 0.3, "depth": 2, "act": "relu"}


# -- hyperparameters in checkpoints, load_from_checkpoint -----------------------------------------------------------

def test_hyper_parameters_in_checkpoint(tmp_path):
    path = tmp_path / "subset.ckpt"

    class SubsetFit(Subset):
        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    _fit_and_save(SubsetFit(lr=0.02, hidden=6), path)
    assert load_checkpoint(path)["hyper_parameters"] == {"lr": 0.02, "hidden": 6}


def test_load_from_checkpoint_rebuilds_with_saved_hparams_and_weights(tmp_path):
    path = tmp_path / "model.ckpt"
    trained = Regressor(lr=0.2, features=3)
    _fit_and_save(trained, path, features=3)
    loaded = Regressor.load_from_checkpoint(path)
    assert type(loaded) is Regressor
    assert loaded.hparams == {"lr": 0.2, "features": 3}
    assert loaded.net.in_features == 3
    _assert_weights(loaded.state_dict(), trained.state_dict())
    x = torch.randn(5, 3)
    torch.testing.assert_close(loaded(x), trained(x))


def test_load_from_checkpoint_overrides(tmp_path):
    path = tmp_path / "model.ckpt"
    trained = Regressor(lr=0.2, features=3)
    _fit_and_save(trained, path, features=3)
    loaded = Regressor.load_from_checkpoint(str(path), lr=0.01)
    assert loaded.hparams == {"lr": 0.01, "features": 3}
    _assert_weights(loaded.state_dict(), trained.state_dict())


class NeedsBackbone(framework.Module):
    def __init__(self, backbone: nn.Module, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters(ignore="backbone")
        self.backbone = backbone
        self.head = nn.Linear(2, 1)

    def forward(self, x):
        return self.head(self.backbone(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def test_load_from_checkpoint_missing_init_argument_is_a_clear_error(tmp_path):
    path = tmp_path / "model.ckpt"
    torch.manual_seed(0)
    trained = NeedsBackbone(nn.Linear(4, 2), lr=0.05)
    _fit_and_save(trained, path)
    with pytest.raises(MisconfigurationError, match="backbone"):
        NeedsBackbone.load_from_checkpoint(path)
    loaded = NeedsBackbone.load_from_checkpoint(path, backbone=nn.Linear(4, 2))
    assert loaded.hparams == {"lr": 0.05}
    _assert_weights(loaded.state_dict(), trained.state_dict())


class TakesModule(NeedsBackbone):
    def __init__(self, backbone: nn.Module, lr: float = 0.1) -> None:
        framework.Module.__init__(self)
        self.save_hyperparameters()  # backbone is not ignored: it cannot go into a checkpoint
        self.backbone = backbone
        self.head = nn.Linear(2, 1)


def test_non_plain_hparam_warns_and_is_left_out_of_the_checkpoint(tmp_path):
    path = tmp_path / "model.ckpt"
    torch.manual_seed(0)
    trained = TakesModule(nn.Linear(4, 2), lr=0.05)
    assert isinstance(trained.hparams.backbone, nn.Linear)  # kept in memory
    with pytest.warns(UserWarning, match="backbone"):
        _fit_and_save(trained, path)
    checkpoint = load_checkpoint(path)
    assert checkpoint["hyper_parameters"] == {"lr": 0.05}
    loaded = TakesModule.load_from_checkpoint(path, backbone=nn.Linear(4, 2))
    _assert_weights(loaded.state_dict(), trained.state_dict())


class Mode(Enum):
    FAST = "fast"


@dataclasses.dataclass
class Schedule:
    warmup: int
    milestones: tuple


DATA_ROOT, SCHEDULE = Path("data") / "train", Schedule(2, (5, 9))
OPTIONS = argparse.Namespace(depth=3, names={"a", "b"})


class Configured(framework.Module):
    """Takes hyperparameters of the kinds research code passes: paths, enums, dataclasses, dtypes, nesting."""

    def __init__(self, root=DATA_ROOT, mode=Mode.FAST, schedule=SCHEDULE, dtype=torch.float64, options=OPTIONS,
                 sizes=(2, [3, 4])) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_hparams_are_saved_in_their_plain_form_and_come_back_through_load_from_checkpoint(tmp_path):
    path = tmp_path / "model.ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _fit_and_save(Configured(), path)
    saved = torch.load(path, weights_only=True)["hyper_parameters"]
    assert saved == {"root": str(Path("data") / "train"), "mode": "fast",
                     "schedule": {"warmup": 2, "milestones": (5, 9)}, "dtype": torch.float64,
                     "options": {"depth": 3, "names": {"a", "b"}}, "sizes": (2, [3, 4])}
    loaded = Configured.load_from_checkpoint(path)
    assert dict(loaded.hparams) == saved


# -- what the module reads from the trainer -----------------------------------------------------------------------

class Recorder(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple] = []

    def training_step(self, batch, batch_idx):
        trainer = self.trainer
        self.seen.append((self.device, trainer.runtime.device, self.global_step, trainer.global_step,
                          self.current_epoch, trainer.current_epoch, batch[0].device))
        return super().training_step(batch, batch_idx)


def test_device_global_step_current_epoch_inside_training_step():
    model = Recorder()
    assert model.global_step == 0 and model.current_epoch == 0  # unattached defaults
    trainer = quiet_trainer(max_epochs=2)
    trainer.fit(model, loader(32, 8))
    assert len(model.seen) == 8
    for index, (device, runtime_device, step, trainer_step, epoch, trainer_epoch, batch_device) in \
            enumerate(model.seen):
        assert device == runtime_device == batch_device == torch.device("cpu")
        assert step == trainer_step == index
        assert epoch == trainer_epoch == index // 4
    assert model.global_step == trainer.global_step == 8


def test_module_trainer_before_attachment_raises():
    model = Regressor()
    with pytest.raises(RuntimeError, match="not attached"):
        model.trainer
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(model, loader(16, 8))
    assert model.trainer is trainer


def test_print_prints(capsys):
    class Printing(Regressor):
        def training_step(self, batch, batch_idx):
            self.print("step", batch_idx, sep="=")
            return super().training_step(batch, batch_idx)

    model = Printing()
    model.print("outside", 1)
    quiet_trainer(max_epochs=1).fit(model, loader(16, 8))
    out = capsys.readouterr().out
    assert "outside 1\n" in out
    assert "step=0\n" in out and "step=1\n" in out


def test_log_without_a_trainer_warns_and_after_its_loops_is_refused():
    model = Regressor()
    with pytest.warns(UserWarning, match="outside a Trainer"):
        model.log("stray", 1.0)
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(model, loader(16, 8))
    assert "stray" not in trainer.callback_metrics
    assert "train_loss" in trainer.callback_metrics
    # after the run, attached to a Trainer whose loops ended: refused, as Lightning refuses it
    with pytest.raises(MisconfigurationError, match=r"self.log\('late', ...\) outside the Trainer's loops"):
        model.log("late", 2.0)
    assert "late" not in trainer.callback_metrics


@pytest.mark.parametrize("value", [None, {"x": None}])
def test_logging_none_or_a_dict_raises_with_or_without_a_trainer(value):
    hint = "self.log_dict" if value is not None else "accepted: a Python number"
    with pytest.raises(MisconfigurationError, match=rf"self.log\('bad', value\) got .*{hint}"):
        Regressor().log("bad", value)

    class LogsIt(Regressor):
        def training_step(self, batch, batch_idx):
            self.log("bad", value)
            return super().training_step(batch, batch_idx)

    with pytest.raises(MisconfigurationError, match=rf"self.log\('bad', value\) got .*{hint}"):
        quiet_trainer(max_epochs=1).fit(LogsIt(), loader(16, 8))


# -- optimizers(), lr_schedulers() ----------------------------------------------------------------------------------

def test_optimizers_and_lr_schedulers_single_objects():
    class WithScheduler(Regressor):
        def __init__(self) -> None:
            super().__init__()
            self.got: list = []

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)]

        def training_step(self, batch, batch_idx):
            self.got.append((self.optimizers(), self.lr_schedulers()))
            return super().training_step(batch, batch_idx)

    model = WithScheduler()
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(model, loader(16, 8))
    for optimizer, scheduler in model.got:
        assert optimizer is trainer.optimizers[0]
        assert isinstance(optimizer, torch.optim.SGD)
        assert scheduler is trainer.lr_scheduler_configs[0].scheduler
        assert isinstance(scheduler, torch.optim.lr_scheduler.StepLR)

    plain = Regressor()
    quiet_trainer(max_epochs=1).fit(plain, loader(16, 8))
    assert plain.lr_schedulers() is None
    assert isinstance(plain.optimizers(), torch.optim.SGD)


class TwoPart(framework.Module):
    """Manual optimization, two optimizers over disjoint halves, stepped in turn with toggle_optimizer."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        torch.manual_seed(0)
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 1)
        self.kinds: list = []
        self.frozen_while_a: list[bool] = []
        self.b_grad_after_a: list = []

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))

    def configure_optimizers(self):
        opt_a = torch.optim.SGD(self.a.parameters(), lr=0.1)
        opt_b = torch.optim.SGD(self.b.parameters(), lr=0.05, momentum=0.5)
        return [opt_a, opt_b], [torch.optim.lr_scheduler.StepLR(opt_a, 1, 0.5),
                                torch.optim.lr_scheduler.StepLR(opt_b, 1, 0.8)]

    def training_step(self, batch, batch_idx):
        x, y = batch
        optimizers, schedulers = self.optimizers(), self.lr_schedulers()
        self.kinds.append((type(optimizers), len(optimizers), type(schedulers), len(schedulers)))
        opt_a, opt_b = optimizers

        self.toggle_optimizer(opt_a)
        self.frozen_while_a.append(all(not p.requires_grad for p in self.b.parameters()))
        self.manual_backward(nn.functional.mse_loss(self(x), y))
        self.b_grad_after_a.append(self.b.weight.grad)
        opt_a.step()
        opt_a.zero_grad()
        self.untoggle_optimizer(opt_a)

        self.toggle_optimizer(opt_b)
        self.manual_backward(nn.functional.mse_loss(self(x), y))
        opt_b.step()
        opt_b.zero_grad()
        self.untoggle_optimizer(opt_b)

    def on_train_epoch_end(self):
        for scheduler in self.lr_schedulers():
            scheduler.step()


def test_manual_two_optimizers_with_toggle_equals_plain_pytorch():
    model = TwoPart()
    trainer = quiet_trainer(max_epochs=2)
    trainer.fit(model, loader(32, 8))
    assert model.kinds == [(list, 2, list, 2)] * 8
    assert model.frozen_while_a == [True] * 8
    assert model.b_grad_after_a == [None] * 8
    assert all(p.requires_grad for p in model.parameters())  # untoggled
    assert trainer.global_step == 16  # each optimizer step counts

    reference = TwoPart()
    opt_a = torch.optim.SGD(reference.a.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(reference.b.parameters(), lr=0.05, momentum=0.5)
    schedulers = [torch.optim.lr_scheduler.StepLR(opt_a, 1, 0.5), torch.optim.lr_scheduler.StepLR(opt_b, 1, 0.8)]
    for _ in range(2):
        for x, y in loader(32, 8):
            for opt in (opt_a, opt_b):
                nn.functional.mse_loss(reference(x), y).backward()
                opt.step()
                reference.zero_grad(set_to_none=True)
        for scheduler in schedulers:
            scheduler.step()
    _assert_weights(model.state_dict(), reference.state_dict())


def test_toggle_keeps_a_frozen_parameter_frozen():
    model = TwoPart()
    model.a.bias.requires_grad = False  # frozen by the user
    opt_a = torch.optim.SGD(model.a.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(model.b.parameters(), lr=0.1)
    model.toggle_optimizer(opt_b)
    assert not model.a.weight.requires_grad and not model.a.bias.requires_grad
    assert model.b.weight.requires_grad and model.b.bias.requires_grad
    model.untoggle_optimizer(opt_b)
    assert model.a.weight.requires_grad
    assert not model.a.bias.requires_grad
    model.toggle_optimizer(opt_a)
    assert not model.b.weight.requires_grad
    assert model.a.weight.requires_grad and not model.a.bias.requires_grad
    model.untoggle_optimizer(opt_a)
    assert model.b.weight.requires_grad and not model.a.bias.requires_grad


# -- freeze / unfreeze ------------------------------------------------------------------------------------------------

def test_freeze_and_unfreeze():
    model = TwoPart()
    model.add_module("drop", nn.Dropout(0.5))
    model.freeze()
    assert all(not p.requires_grad for p in model.parameters())
    assert not model.training and not model.drop.training
    x = torch.randn(3, 4)
    out = model(x)
    assert not out.requires_grad
    model.unfreeze()
    assert all(p.requires_grad for p in model.parameters())
    assert model.training and model.drop.training
    assert model(x).requires_grad


def test_log_inside_the_loop_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet_trainer(max_epochs=1).fit(Regressor(), loader(16, 8))


def test_a_fitted_module_pickles_and_copies_without_its_trainer(tmp_path):
    import copy
    import pickle

    model = Regressor()
    quiet_trainer(max_epochs=1, limit_train_batches=1).fit(model, loader(16, 8))
    copied = copy.deepcopy(model)
    assert copied._trainer is None and model._trainer is not None
    restored = pickle.loads(pickle.dumps(model))
    torch.testing.assert_close(restored.net.weight, model.net.weight)
    torch.save(model, tmp_path / "model.pt")


def test_load_from_checkpoint_takes_hyperparameters_from_a_yaml_file(tmp_path):
    path = tmp_path / "model.ckpt"
    trained = Regressor(lr=0.2, features=3)
    _fit_and_save(trained, path, features=3)
    (tmp_path / "hparams.yaml").write_text("lr: 0.5\nfeatures: 3\n")
    loaded = Regressor.load_from_checkpoint(path, hparams_file=tmp_path / "hparams.yaml")
    assert loaded.hparams == {"lr": 0.5, "features": 3}
    _assert_weights(loaded.state_dict(), trained.state_dict())
    with pytest.raises(MisconfigurationError, match=r"hparams_file=.*hparams\.txt.*\.yaml or \.yml"):
        Regressor.load_from_checkpoint(path, hparams_file=tmp_path / "hparams.txt")


def test_strict_loading_decides_how_missing_keys_are_treated(tmp_path):
    class Wider(Regressor):
        def __init__(self, lr: float = 0.05, features: int = 4):
            super().__init__(lr, features)
            self.register_buffer("extra", torch.zeros(2))

    path = tmp_path / "model.ckpt"
    _fit_and_save(Regressor(), path)
    with pytest.raises(RuntimeError, match="Missing key"):
        Wider.load_from_checkpoint(path)
    Wider.load_from_checkpoint(path, strict=False)

    class Lenient(Wider):
        def __init__(self, lr: float = 0.05, features: int = 4):
            super().__init__(lr, features)
            self.strict_loading = False

    Lenient.load_from_checkpoint(path)  # strict=None follows the module's strict_loading
    quiet_trainer(max_epochs=2).fit(Lenient(), loader(), ckpt_path=path)  # resuming does too


def test_hparams_initial_keeps_the_saved_values():
    model = Regressor(lr=0.3)
    model.hparams.lr = 0.01
    assert model.hparams.lr == 0.01 and model.hparams_initial == {"lr": 0.3, "features": 4}

    class Nested(framework.Module):
        def __init__(self, optim: dict) -> None:
            super().__init__()
            self.save_hyperparameters()

    nested = Nested({"lr": 0.1})
    nested.hparams.optim["lr"] = 0.5
    assert nested.hparams_initial.optim == {"lr": 0.1}


def test_dtype_and_on_gpu():
    model = Regressor()
    assert model.dtype == torch.float32 and not model.on_gpu
    assert model.double().dtype == torch.float64
    assert framework.Module().dtype == torch.get_default_dtype()


def test_to_torchscript_by_script_and_by_trace_gives_the_same_outputs(tmp_path):
    model = Regressor()
    x = torch.randn(3, 4)
    scripted = model.to_torchscript(tmp_path / "model.pt")
    traced = model.to_torchscript(method="trace", example_inputs=x)
    torch.testing.assert_close(scripted(x), model(x))
    torch.testing.assert_close(traced(x), model(x))
    torch.testing.assert_close(torch.jit.load(tmp_path / "model.pt")(x), model(x))
    assert model.training  # the export left the mode as it was
    with pytest.raises(MisconfigurationError, match=r"method='graph'.*'script' or 'trace'"):
        model.to_torchscript(method="graph")
    with pytest.raises(MisconfigurationError, match=r"needs example_inputs"):
        model.to_torchscript(method="trace")
    with pytest.raises(MisconfigurationError, match=r"to_onnx needs input_sample"):
        model.to_onnx(tmp_path / "model.onnx")


def test_a_module_saving_one_namespace_argument_loads_back_through_it(tmp_path):
    class FromArgs(framework.Module):
        def __init__(self, args) -> None:
            super().__init__()
            self.save_hyperparameters(args)
            self.net = nn.Linear(args.features, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    path = tmp_path / "model.ckpt"
    trained = FromArgs(argparse.Namespace(lr=0.1, features=4))
    _fit_and_save(trained, path)
    assert load_checkpoint(path)["hparams_name"] == "args"
    loaded = FromArgs.load_from_checkpoint(path)
    assert loaded.hparams == {"lr": 0.1, "features": 4}
    _assert_weights(loaded.state_dict(), trained.state_dict())
