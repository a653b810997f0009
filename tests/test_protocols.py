"""``TrainerLike``, what callbacks and the Module may use of the Trainer: the Trainer has every member it lists."""

from __future__ import annotations

import inspect
import typing

import framework
from framework.protocols import TrainerLike
from tests.helpers import Regressor, loader, quiet_trainer


def _members(protocol: type) -> set[str]:
    annotated = set(typing.get_type_hints(protocol))
    methods = {name for name, value in vars(protocol).items()
               if inspect.isfunction(value) and not name.startswith("__")}
    return annotated | methods


def test_the_trainer_has_every_member_of_trainer_like_before_and_after_a_run():
    members = _members(TrainerLike)
    assert {"current_epoch", "callback_metrics", "save_checkpoint", "runtime", "fit"} <= members
    trainer = quiet_trainer(max_epochs=1)
    missing = sorted(name for name in members if not hasattr(trainer, name))
    assert not missing, f"framework.Trainer lacks {missing}, which framework.protocols.TrainerLike promises"
    trainer.fit(Regressor(), loader())
    assert isinstance(trainer, TrainerLike)


def test_a_callback_is_handed_the_trainer_as_a_trainer_like():
    seen = []

    class Records(framework.Callback):
        def on_train_start(self, trainer: TrainerLike, pl_module: framework.Module) -> None:
            seen.append(isinstance(trainer, TrainerLike) and trainer is pl_module.trainer)

    quiet_trainer(max_epochs=1, callbacks=[Records()]).fit(Regressor(), loader())
    assert seen == [True]
