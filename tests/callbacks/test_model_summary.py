"""ModelSummary: counts against a hand count, depth, modes, and printing at fit start."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from framework.callbacks import ModelSummary
from framework.callbacks.model_summary import Summary, readable_count
from tests.helpers import Regressor, loader, quiet_trainer


class Frozen(Regressor):
    """encoder Linear(4, 8) + ReLU, head Linear(8, 2) frozen, a BatchNorm kept in eval mode."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = nn.Linear(8, 2)
        self.norm = nn.BatchNorm1d(2).eval()
        for p in self.head.parameters():
            p.requires_grad = False


def test_counts_match_a_hand_count():
    summary = Summary(Frozen(), max_depth=1)
    # net Linear(4,1): 5; encoder: 4*8+8 = 40; head: 8*2+2 = 18 (frozen); norm: 2+2 = 4
    assert [(r.name, r.type, r.params) for r in summary.rows] == [
        ("net", "Linear", 5), ("encoder", "Sequential", 40), ("head", "Linear", 18), ("norm", "BatchNorm1d", 4)]
    assert summary.total_parameters == 67 and summary.trainable_parameters == 49
    assert summary.size_mb == 67 * 4 / 1e6
    # submodules only, as Lightning counts: net, encoder, encoder.0, encoder.1, head in train mode; norm in eval
    assert (summary.training_modules, summary.eval_modules) == (5, 1)
    text = str(summary)
    for expected in ("49        Trainable params", "18        Non-trainable params", "67        Total params",
                     "0.000     Total estimated model params size (MB)", "1         Modules in eval mode"):
        assert expected in text
    assert "3 | norm    | BatchNorm1d | 4      | eval  | 0" in text and "0         Total Flops" in text
    assert "In sizes" not in text  # without an example input there is nothing to measure


def test_an_example_input_gives_flops_and_sizes_per_layer():
    class Chain(Frozen):
        def forward(self, x):
            return self.norm(self.head(self.encoder(x)))

    model = Chain()
    model.example_input_array = torch.randn(3, 4)
    summary = Summary(model, max_depth=1, example_input=model.example_input_array)
    rows = {r.name: r for r in summary.rows}
    # a (3, 4) @ (4, 8) matmul is 2*3*4*8 = 192 FLOPs; (3, 8) @ (8, 2) is 96; the unused net Linear did nothing
    assert [(n, rows[n].flops, rows[n].in_size, rows[n].out_size) for n in rows] == [
        ("net", 0, "?", "?"), ("encoder", 192, [3, 4], [3, 8]), ("head", 96, [3, 8], [3, 2]),
        ("norm", 0, [3, 2], [3, 2])]
    assert summary.total_flops == 288 and model.training and not model.norm.training  # modes restored
    text = str(summary)
    assert "1 | encoder | Sequential  | 40     | train | 192   | [3, 4]   | [3, 8]" in text
    assert "288       Total Flops" in text


def test_depth_two_shows_the_children_and_minus_one_everything():
    assert [r.name for r in Summary(Frozen(), max_depth=2).rows] == [
        "net", "encoder", "encoder.0", "encoder.1", "head", "norm"]
    deep = nn.Sequential(nn.Sequential(nn.Sequential(nn.Linear(1, 1))))
    assert [r.name for r in Summary(deep, max_depth=-1).rows] == ["0", "0.0", "0.0.0"]


def test_readable_counts():
    assert [readable_count(n) for n in (7, 1_234, 12_345, 5_300_000, 123_000_000, 2_000_000_000)] == [
        "7", "1.2 K", "12.3 K", "5.3 M", "123 M", "2.0 B"]


def test_it_is_printed_when_fit_starts(caplog):
    with caplog.at_level("INFO", logger="framework"):
        quiet_trainer(max_epochs=1, enable_model_summary=True).fit(Regressor(), loader())
    assert any("Total params" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level("INFO", logger="framework"):
        quiet_trainer(max_epochs=1, callbacks=[ModelSummary(max_depth=0)], enable_model_summary=True).fit(
            Regressor(), loader())
    assert not any("Total params" in r.getMessage() for r in caplog.records)
    assert torch.is_grad_enabled()


def test_extra_summarize_arguments_are_kept_for_subclasses_as_in_lightning():
    summary = ModelSummary(max_depth=2, header_style="bold")
    assert summary.max_depth == 2 and summary._summarize_kwargs == {"header_style": "bold"}


def test_the_rich_summary_draws_the_same_table_with_rich(capsys):
    pytest.importorskip("rich", reason="the dev extra installs rich")
    from framework.callbacks import RichModelSummary

    trainer = quiet_trainer(max_epochs=1, enable_model_summary=True, callbacks=[RichModelSummary(max_depth=1)])
    assert [type(cb).__name__ for cb in trainer.callbacks].count("ModelSummary") == 0  # it replaces the default
    trainer.fit(Regressor(), loader())
    out = capsys.readouterr().out
    assert "┃" in out and "Name" in out and "Linear" in out  # a rich table of the layers
    assert "Trainable params" in out and "Total estimated model params size (MB)" in out
