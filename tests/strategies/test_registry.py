"""``strategy=``: names, aliases, instances, unknown names and registering new strategies."""

from __future__ import annotations

import pytest

from framework.errors import MisconfigurationError
from framework.strategies import SingleDeviceStrategy, Strategy, register_strategy, registry, resolve_strategy


@pytest.fixture
def restore_registry():
    """Put the registry's dicts back as they were after the test."""
    builders, aliases = dict(registry._BUILDERS), dict(registry._ALIASES)
    yield
    registry._BUILDERS.clear()
    registry._BUILDERS.update(builders)
    registry._ALIASES.clear()
    registry._ALIASES.update(aliases)


@pytest.mark.parametrize("name", ["auto", "single", "AUTO", "Single", "single_device"])
def test_auto_and_single_give_the_single_device_strategy(name):
    assert type(resolve_strategy(name)) is SingleDeviceStrategy


def test_each_call_builds_a_new_strategy():
    assert resolve_strategy("single") is not resolve_strategy("single")


def test_an_instance_passes_through():
    strategy = SingleDeviceStrategy()
    assert resolve_strategy(strategy) is strategy


@pytest.mark.parametrize("name", ["nonsense", "", None, 1, SingleDeviceStrategy])
def test_unknown_names_list_the_accepted_ones(name):
    with pytest.raises(MisconfigurationError, match=r"is not a known strategy") as info:
        resolve_strategy(name)
    message = str(info.value)
    assert f"strategy={name!r}" in message
    for accepted in ("'auto'", "'single'", "Strategy instance"):
        assert accepted in message, message


class _Custom(Strategy):
    name = "custom"


def test_register_strategy_adds_a_name_and_aliases(restore_registry):
    register_strategy("custom", _Custom, aliases=("my_alias",))
    assert type(resolve_strategy("custom")) is _Custom
    assert type(resolve_strategy("MY_ALIAS")) is _Custom
    with pytest.raises(MisconfigurationError, match=r"'custom'.*'my_alias'"):
        resolve_strategy("still-unknown")  # new names are listed among the accepted ones


def test_the_registry_was_restored():
    # runs after the test above (file order): the fixture removed what it registered
    assert "custom" not in registry._BUILDERS and "my_alias" not in registry._ALIASES
    with pytest.raises(MisconfigurationError, match="strategy='custom'"):
        resolve_strategy("custom")


def _what_lightning_code_reads(rank: int, strategy: str) -> tuple:
    import torch

    import framework

    trainer = framework.Trainer(accelerator="cpu", devices=2, strategy=strategy, precision="bf16-mixed",
                                logger=False, enable_progress_bar=False)
    used = trainer.strategy
    return (used.root_device == torch.device("cpu"), used.is_global_zero, used.world_size, used.global_rank,
            used.precision_plugin is trainer.precision_plugin, trainer.precision)


@pytest.mark.parametrize("strategy", ["ddp", "zero1", "zero3"])
def test_every_strategy_answers_what_lightning_code_reads_of_it(strategy):
    from framework.testing import spawn

    assert spawn(2, _what_lightning_code_reads, strategy) == [
        (True, True, 2, 0, True, "bf16-mixed"), (True, False, 2, 1, True, "bf16-mixed")]


def test_the_single_device_strategy_answers_it_too():
    import torch

    import framework

    trainer = framework.Trainer(accelerator="cpu", precision="16-mixed", logger=False)
    used = trainer.strategy
    assert used.root_device == torch.device("cpu") and used.is_global_zero and used.world_size == 1
    assert used.precision_plugin is trainer.precision_plugin and trainer.precision == "16-mixed"
