"""``framework.utilities``: the helpers Lightning code imports from ``lightning.pytorch.utilities``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import framework
from framework.utilities import AttributeDict, grad_norm, rank_zero_info, rank_zero_only, rank_zero_warn
from framework.utilities.exceptions import MisconfigurationException
from framework.utilities.types import STEP_OUTPUT, OptimizerLRScheduler
from framework.utilities.warnings import PossibleUserWarning
from tests.helpers import Regressor, loader, quiet_trainer


@rank_zero_only
def note_rank(path: str, rank: int) -> str:
    with open(path, "a") as file:
        file.write(f"{rank}\n")
    return "written"


class NotesOnRankZero(framework.Callback):
    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_epoch_end(self, trainer, pl_module):
        note_rank(self.path, trainer.global_rank)


def test_rank_zero_only_runs_on_global_rank_zero_of_a_real_two_rank_run(tmp_path):
    path = str(tmp_path / "ranks.txt")
    quiet_trainer(devices=2, max_epochs=2, callbacks=[NotesOnRankZero(path)]).fit(Regressor(), loader())
    with open(path) as file:
        assert file.read().split() == ["0", "0"]  # once per epoch, by rank 0 only
    assert note_rank(path, 0) == "written"  # this process is rank 0 again


def test_rank_zero_only_reads_the_launchers_rank_at_import_and_returns_the_default_elsewhere():
    code = ("from framework.utilities import rank_zero_only, rank_zero_warn\n"
            "import warnings\n"
            "print(rank_zero_only.rank, rank_zero_only(lambda: 'ran', default='skipped')())\n"
            "with warnings.catch_warnings(record=True) as seen:\n"
            "    warnings.simplefilter('always')\n"
            "    rank_zero_warn('careful')\n"
            "print(len(seen))\n")
    for environment, expected in (({"RANK": "1"}, "1 skipped\n0\n"), ({"SLURM_PROCID": "0"}, "0 ran\n1\n")):
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "SLURM_PROCID")}
        done = subprocess.run([sys.executable, "-c", code], env={**env, **environment}, capture_output=True,
                              text=True, check=True, cwd=os.path.dirname(os.path.dirname(__file__)))
        assert done.stdout == expected


def test_rank_zero_info_and_warn_speak_on_rank_zero(caplog):
    with caplog.at_level("INFO", logger="framework"):
        rank_zero_info("hello from rank zero")
    assert "hello from rank zero" in caplog.messages
    with pytest.warns(PossibleUserWarning, match="maybe a mistake"):
        rank_zero_warn("maybe a mistake", PossibleUserWarning)
    assert issubclass(PossibleUserWarning, UserWarning)


def test_grad_norm_matches_the_norms_computed_by_hand():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 1, bias=False))
    model(torch.randn(5, 4)).sum().backward()
    model[0].bias.grad = None  # a parameter without a gradient is left out
    norms = grad_norm(model, norm_type=2)
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert list(norms) == [f"grad_2.0_norm/{name}" for name in grads] + ["grad_2.0_norm_total"]
    for name, grad in grads.items():
        torch.testing.assert_close(norms[f"grad_2.0_norm/{name}"], grad.norm(2))
    total = torch.cat([g.flatten() for g in grads.values()]).norm(2)
    torch.testing.assert_close(norms["grad_2.0_norm_total"], total)
    torch.testing.assert_close(grad_norm(model, "inf")["grad_inf_norm_total"],
                               max(g.abs().max() for g in grads.values()))
    with pytest.raises(MisconfigurationException, match=r"grad_norm\(norm_type=0"):
        grad_norm(model, 0)


def test_grad_norm_logs_from_on_before_optimizer_step_without_reading_the_device():
    class LogsNorms(Regressor):
        def on_before_optimizer_step(self, optimizer):
            self.log_dict(grad_norm(self, norm_type=2))

    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(LogsNorms(), loader())
    assert trainer.callback_metrics["grad_2.0_norm_total"] > 0


def test_lightnings_type_aliases_and_names_are_there():
    def training_step(batch: torch.Tensor) -> STEP_OUTPUT:
        return batch.sum()

    def configure_optimizers() -> OptimizerLRScheduler:
        return None

    assert training_step(torch.ones(2)) == 2 and configure_optimizers() is None
    assert MisconfigurationException is framework.MisconfigurationError
    assert AttributeDict(a=1).a == 1


def test_a_wrapped_package_counts_as_installed_when_a_stand_in_without_a_spec_was_imported(monkeypatch):
    import types

    from framework.errors import MissingPackageError, require_package

    with pytest.raises(MissingPackageError, match='needs no_such_package_here.*pip install "framework\\[x\\]"'):
        require_package("no_such_package_here", "SomeLogger", extra="x")
    stand_in = types.ModuleType("no_such_package_here")  # what tests that replace mlflow or wandb put there
    monkeypatch.setitem(sys.modules, "no_such_package_here", stand_in)
    require_package("no_such_package_here", "SomeLogger", extra="x")
