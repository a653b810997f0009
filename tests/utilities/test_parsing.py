"""``framework.utilities.parsing`` (Lightning's ``utilities.parsing``): constructor arguments read from a frame, and
attribute look-ups through ``hparams`` and the DataModule, as Lightning does them."""

from __future__ import annotations

import inspect
import pickle
import threading

import pytest
import torch

import framework
from framework.utilities.parsing import (
    AttributeDict,
    clean_namespace,
    collect_init_args,
    get_init_args,
    is_picklable,
    lightning_getattr,
    lightning_hasattr,
    lightning_setattr,
    parse_class_init_keys,
    save_hyperparameters,
    str_to_bool,
)
from tests.helpers import Regressor, loader, quiet_trainer


class Base:
    def __init__(self, width: int = 2, *args, **kwargs) -> None:
        super().__init__()  # a constructor that calls super() keeps its class in its frame: Lightning reads that
        self.frames = collect_init_args(inspect.currentframe(), [])
        self.base_args = get_init_args(inspect.currentframe())


class Child(Base):
    def __init__(self, depth: int, width: int = 3, **options) -> None:
        super().__init__(width, **options)
        self.child_args = get_init_args(inspect.currentframe())


def test_get_init_args_reads_the_running_constructor_with_its_keyword_arguments():
    child = Child(4, colour="red")
    assert child.child_args == {"depth": 4, "width": 3, "colour": "red"}
    assert child.base_args == {"width": 3, "colour": "red"}
    assert get_init_args(inspect.currentframe()) == {}  # not a constructor


def test_collect_init_args_walks_the_super_chain_most_derived_last():
    child = Child(4, colour="red")
    assert child.frames == [{"width": 3, "colour": "red"}, {"depth": 4, "width": 3, "colour": "red"}]


def test_parse_class_init_keys_names_self_args_and_kwargs():
    assert parse_class_init_keys(Base) == ("self", "args", "kwargs")
    assert parse_class_init_keys(Child) == ("self", None, "options")


def test_lightning_attribute_helpers_search_the_model_its_hparams_and_the_datamodule():
    class Data(framework.DataModule):
        def __init__(self) -> None:
            super().__init__()
            self.batch_size = 16

        def train_dataloader(self):
            return loader(batch_size=self.batch_size)

    model, data = Regressor(lr=0.05), Data()
    assert lightning_hasattr(model, "lr") and lightning_getattr(model, "lr") == 0.05
    assert not lightning_hasattr(model, "batch_size")
    trainer = quiet_trainer(max_steps=1)
    trainer.fit(model, datamodule=data)
    assert lightning_getattr(model, "batch_size") == 16
    lightning_setattr(model, "batch_size", 8)
    lightning_setattr(model, "lr", 0.01)
    assert data.batch_size == 8 and model.hparams.lr == 0.01
    with pytest.raises(AttributeError, match="missing_name is neither an attribute of the model"):
        lightning_getattr(model, "missing_name")


def test_small_helpers():
    assert is_picklable({"a": 1}) and not is_picklable(threading.Lock())
    params = {"keep": 1, "lock": threading.Lock()}
    with pytest.warns(UserWarning, match="'lock' removed from hparams"):
        clean_namespace(params)
    assert params == {"keep": 1}
    assert str_to_bool("Yes") and not str_to_bool("off")
    with pytest.raises(ValueError, match="str_to_bool\\('maybe'\\)"):
        str_to_bool("maybe")
    assert pickle.loads(pickle.dumps(AttributeDict(lr=0.1))).lr == 0.1


def test_save_hyperparameters_as_a_function_reads_the_callers_constructor():
    class Model(framework.Module):
        def __init__(self, hidden: int = 4, dropout: float = 0.1) -> None:
            super().__init__()
            save_hyperparameters(self, ignore="dropout")
            self.layer = torch.nn.Linear(hidden, 1)

    assert dict(Model(hidden=8).hparams) == {"hidden": 8}
