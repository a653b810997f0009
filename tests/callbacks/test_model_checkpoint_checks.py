"""ModelCheckpoint's argument checks: each bad value is refused naming the argument, the value and what is
accepted; save_last='link' is checked against the directory once it is known (at setup)."""

from __future__ import annotations

import pytest

from framework.callbacks import ModelCheckpoint
from framework.errors import MisconfigurationError
from framework.loggers import CSVLogger
from tests.helpers import Regressor, loader, quiet_trainer


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"save_top_k": -2}, r"save_top_k=-2 \(type int\)\): accepted is an int >= -1"),
    ({"mode": "avg"}, r"mode='avg' \(type str\)\): accepted 'min' or 'max'"),
    ({"save_top_k": 3}, r"save_top_k=3, monitor=None\): without a monitored metric"),
    ({"every_n_epochs": -1}, r"every_n_epochs=-1"),
    ({"every_n_train_steps": 2, "every_n_epochs": 1}, r"alternatives; give one of them"),
    ({"train_time_interval": 5}, r"train_time_interval=5 \(type int\)\): accepted is a datetime.timedelta"),
    ({"save_last": "yes"}, r"save_last='yes' \(type str\)\): accepted True, False, None or 'link'"),
])
def test_bad_arguments_name_the_argument(kwargs, message):
    with pytest.raises(MisconfigurationError, match=message):
        ModelCheckpoint(**kwargs)


def test_save_last_link_outside_the_local_file_system_is_refused_at_setup_naming_the_directory(memory_root):
    checkpoint = ModelCheckpoint(dirpath=f"{memory_root}/ckpts", save_last="link")  # constructs, as in Lightning
    trainer = quiet_trainer(max_epochs=1, callbacks=[checkpoint], enable_checkpointing=True)
    message = (rf"ModelCheckpoint\(save_last='link'\) is only supported for local file paths, got "
               rf"dirpath='{memory_root}/ckpts'.*Use save_last=True")
    with pytest.raises(ValueError, match=message):
        checkpoint.setup(trainer, Regressor(), "fit")
    trained = []

    class Watches(Regressor):
        def training_step(self, batch, batch_idx):
            trained.append(batch_idx)
            return super().training_step(batch, batch_idx)

    # The directory the logger gives is checked as well: known only at setup, before any training.
    logged = quiet_trainer(max_epochs=1, logger=CSVLogger(memory_root), enable_checkpointing=True,
                           callbacks=[ModelCheckpoint(save_last="link")])
    with pytest.raises(MisconfigurationError, match=rf"dirpath=.{memory_root}/lightning_logs/version_0/checkpoints"):
        logged.fit(Watches(), loader())
    assert trained == []
    local = ModelCheckpoint(dirpath="file://./local", save_last="link")
    local.setup(trainer, Regressor(), "fit")
    assert local.dirpath.endswith("local")
