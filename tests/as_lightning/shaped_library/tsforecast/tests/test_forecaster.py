"""The library's own tests, as it ships them: they import Lightning's names and know nothing of framework."""

import json
import os

import pytorch_lightning as pl
import torch
from lightning_fabric.utilities.cloud_io import _load as pl_load

from tsforecast import Forecaster, fit_forecaster


def test_the_forecaster_learns_and_its_checkpoints_load(tmp_path):
    result = fit_forecaster(str(tmp_path), max_epochs=3, hidden=12)
    assert result["init_args"] == {"length": 8, "hidden": 12, "learning_rate": 0.05}
    assert result["global_step"] == 24 and result["val_loss"] < 0.5
    checkpoint = pl_load(result["last"])
    assert checkpoint["hyper_parameters"]["hidden"] == 12
    with open(result["last"] + ".json") as file:
        assert json.load(file)["global_step"] == 24
    restored = Forecaster.load_from_checkpoint(result["best"])
    assert isinstance(restored, pl.LightningModule) and restored.hparams.hidden == 12


def test_lightnings_version_is_what_the_library_branches_on():
    major, minor = (int(part) for part in pl.__version__.split(".")[:2])
    assert (major, minor) >= (2, 6)
    assert torch.load is not None and os.sep
