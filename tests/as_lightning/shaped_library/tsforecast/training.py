"""The library builds the Trainer itself: its plugin, its callbacks, its logger."""

import os

import lightning.pytorch as lp
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning_fabric.utilities.seed import seed_everything
from pytorch_lightning.utilities import rank_zero_only
from torch.utils.data import DataLoader

from tsforecast.io import SidecarCheckpointIO
from tsforecast.model import Forecaster, SeasonalData


@rank_zero_only
def _report(directory: str, text: str) -> None:
    with open(os.path.join(directory, "report.txt"), "a") as file:
        file.write(text + "\n")


def fit_forecaster(directory: str, devices: int = 1, max_epochs: int = 3, **model_args) -> dict:
    """Train a ``Forecaster`` in ``directory``; what the library hands back to its user."""
    seed_everything(7)
    model = Forecaster(**model_args)
    checkpoint = ModelCheckpoint(dirpath=os.path.join(directory, "checkpoints"), monitor="val_loss", save_top_k=1,
                                 save_last=True)
    trainer = lp.Trainer(default_root_dir=directory, accelerator="cpu", devices=devices,
                         strategy="ddp" if devices > 1 else "auto", max_epochs=max_epochs,
                         plugins=[SidecarCheckpointIO()], logger=CSVLogger(directory, name="logs"),
                         callbacks=[checkpoint, EarlyStopping("val_loss", patience=5)],
                         enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1)
    train = DataLoader(SeasonalData(64), batch_size=8, shuffle=True)
    val = DataLoader(SeasonalData(16, seed=1), batch_size=8)
    trainer.fit(model, train, val)
    _report(directory, f"best={checkpoint.best_model_path}")
    return {"world_size": trainer.world_size, "global_step": trainer.global_step,
            "best": checkpoint.best_model_path, "last": checkpoint.last_model_path,
            "init_args": dict(model.init_args), "val_loss": float(trainer.callback_metrics["val_loss"]),
            "sidecar_saves": SidecarCheckpointIO.saves}
