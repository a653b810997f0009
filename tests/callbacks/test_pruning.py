"""ModelPruning with torch.nn.utils.prune: how much is pruned, the lottery ticket, checkpoints and the end state."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import framework
from framework.callbacks import ModelPruning
from framework.errors import MisconfigurationError
from tests.helpers import Regressor, loader, quiet_trainer


class TwoLayers(Regressor):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))


def _zeros(model: nn.Module) -> float:
    values = torch.cat([p.detach().flatten() for p in model.parameters()])
    return float((values == 0).float().mean())


def test_global_pruning_each_epoch_ends_permanent_with_the_fraction_asked_for(tmp_path):
    model = TwoLayers()
    pruning = ModelPruning("l1_unstructured", amount=0.5, use_lottery_ticket_hypothesis=False)
    trainer = quiet_trainer(max_epochs=2, callbacks=[pruning])
    trainer.fit(model, loader())
    assert _zeros(model) == pytest.approx(0.75, abs=0.02)  # half, then half of what was left
    assert not any(name.endswith("_orig") for name, _ in model.named_parameters())  # permanent: plain parameters
    trainer.save_checkpoint(tmp_path / "pruned.ckpt")
    loaded = TwoLayers.load_from_checkpoint(tmp_path / "pruned.ckpt")
    assert _zeros(loaded) == pytest.approx(0.75, abs=0.02)


def test_checkpoints_during_training_hold_plain_pruned_weights_and_the_lottery_ticket_resets_the_rest(tmp_path):
    start = {name: value.clone() for name, value in TwoLayers().state_dict().items()}

    class Inspect(framework.Callback):
        def on_train_epoch_end(self, trainer, pl_module):  # runs after ModelPruning's
            trainer.save_checkpoint(tmp_path / "mid.ckpt")
            for layer in (0, 2):
                weight = pl_module.net[layer].weight
                kept = weight != 0
                assert torch.equal(weight[kept], start[f"net.{layer}.weight"][kept])

    trainer = quiet_trainer(max_epochs=1, callbacks=[ModelPruning("l1_unstructured", amount=0.3), Inspect()])
    trainer.fit(TwoLayers(), loader())
    saved = torch.load(tmp_path / "mid.ckpt", weights_only=True)["state_dict"]
    assert set(saved) == set(start) and float((saved["net.0.weight"] == 0).float().mean()) > 0


def test_layer_by_layer_structured_pruning_zeroes_whole_rows():
    model = TwoLayers()
    pruning = ModelPruning("ln_structured", parameters_to_prune=[(model.net[0], "weight")], amount=0.25,
                           pruning_dim=0, pruning_norm=1, use_global_unstructured=False,
                           use_lottery_ticket_hypothesis=False)
    quiet_trainer(max_epochs=1, callbacks=[pruning]).fit(model, loader())
    rows = (model.net[0].weight == 0).all(dim=1)
    assert int(rows.sum()) == 4  # a quarter of the 16 rows


def test_bad_arguments_say_what_is_accepted():
    with pytest.raises(MisconfigurationError, match="pruning_fn='l3'"):
        ModelPruning("l3")
    with pytest.raises(MisconfigurationError, match="give pruning_dim"):
        ModelPruning("ln_structured", use_global_unstructured=False)
    with pytest.raises(MisconfigurationError, match="global pruning needs an unstructured method"):
        ModelPruning("ln_structured", pruning_dim=0, pruning_norm=1)
    other = nn.Linear(2, 2)
    with pytest.raises(MisconfigurationError, match="not in the model"):
        quiet_trainer(max_epochs=1, callbacks=[ModelPruning("l1_unstructured", parameters_to_prune=[(other, "weight")])]
                      ).fit(TwoLayers(), loader())
