"""BaseFinetuning's tools and BackboneFinetuning's schedule, against a plain PyTorch loop, across a resume."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from framework.callbacks import BackboneFinetuning, BaseFinetuning
from framework.errors import MisconfigurationError
from tests.helpers import Regressor, loader, quiet_trainer


class WithBackbone(Regressor):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())
        self.net = nn.Linear(8, 1)

    def forward(self, x):
        return self.net(self.backbone(x))

    def configure_optimizers(self):
        return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=0.1)


def _plain_weights(epochs: int) -> dict[str, torch.Tensor]:
    """The schedule by hand: backbone frozen (its batch norm trains) in epoch 0, its own group from epoch 1 at
    0.1 * 0.1, then multiplied by 1.5 each epoch, never above the head's 0.1."""
    model = WithBackbone()
    for p in model.backbone[0].parameters():
        p.requires_grad = False
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    backbone_lr = 0.01
    for epoch in range(epochs):
        if epoch == 1:
            for p in model.backbone[0].parameters():
                p.requires_grad = True
            optimizer.add_param_group({"params": list(model.backbone[0].parameters()), "lr": backbone_lr})
        elif epoch > 1:
            backbone_lr = min(1.5 * backbone_lr, 0.1)
            optimizer.param_groups[-1]["lr"] = backbone_lr
        for x, y in loader():
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def _finetuning() -> BackboneFinetuning:
    return BackboneFinetuning(unfreeze_backbone_at_epoch=1, lambda_func=lambda epoch: 1.5)


def test_backbone_finetuning_trains_as_the_schedule_written_by_hand():
    model = WithBackbone()
    start = model.backbone[0].weight.detach().clone()
    seen = []

    class Watch(BackboneFinetuning):
        def on_train_epoch_end(self, trainer, pl_module):
            seen.append(torch.equal(pl_module.backbone[0].weight, start))

    trainer = quiet_trainer(max_epochs=3, callbacks=[Watch(unfreeze_backbone_at_epoch=1, lambda_func=lambda e: 1.5)])
    trainer.fit(model, loader())
    assert seen == [True, False, False]  # frozen in epoch 0 only
    assert [group["lr"] for group in trainer.optimizers[0].param_groups] == [0.1, pytest.approx(0.015)]
    for name, value in _plain_weights(3).items():
        torch.testing.assert_close(model.state_dict()[name], value, msg=name)


def test_a_resumed_run_has_the_backbone_group_again_and_trains_as_one_uninterrupted(tmp_path):
    first = quiet_trainer(max_epochs=2, callbacks=[_finetuning()])
    first.fit(WithBackbone(), loader())
    first.save_checkpoint(tmp_path / "two.ckpt")

    model = WithBackbone()
    resumed = quiet_trainer(max_epochs=3, callbacks=[_finetuning()])
    resumed.fit(model, loader(), ckpt_path=tmp_path / "two.ckpt")
    assert len(resumed.optimizers[0].param_groups) == 2
    assert all(p.requires_grad for p in model.backbone.parameters())  # Lightning leaves these frozen
    for name, value in _plain_weights(3).items():
        torch.testing.assert_close(model.state_dict()[name], value, msg=name)


def test_the_tools_freeze_unfreeze_and_add_groups_as_lightning_does():
    model = WithBackbone()
    BaseFinetuning.freeze(model.backbone, train_bn=False)
    assert not any(p.requires_grad for p in model.backbone.parameters())
    assert not model.backbone[1].track_running_stats
    BaseFinetuning.freeze(model.backbone)  # train_bn=True: the batch norm stays trainable
    assert [p.requires_grad for p in model.backbone.parameters()] == [False, False, True, True]
    optimizer = torch.optim.SGD(model.net.parameters(), lr=0.5)
    BaseFinetuning.unfreeze_and_add_param_group(model.backbone, optimizer)
    assert len(optimizer.param_groups) == 2 and optimizer.param_groups[1]["lr"] == 0.05  # 0.5 / initial_denom_lr
    assert len(optimizer.param_groups[1]["params"]) == 4
    BaseFinetuning.unfreeze_and_add_param_group(model.backbone, optimizer, lr=0.2)  # all held already: no group
    assert len(optimizer.param_groups) == 2
    assert BaseFinetuning.flatten_modules(model.backbone) == list(model.backbone)


def test_without_a_backbone_or_an_implementation_it_says_what_is_missing():
    with pytest.raises(MisconfigurationError, match=r"needs Regressor.backbone, an nn.Module"):
        quiet_trainer(max_epochs=1, callbacks=[BackboneFinetuning()]).fit(Regressor(), loader())
    with pytest.raises(NotImplementedError, match="must implement freeze_before_training"):
        quiet_trainer(max_epochs=1, callbacks=[BaseFinetuning()]).fit(Regressor(), loader())
    with pytest.raises(MisconfigurationError, match=r"unfreeze_backbone_at_epoch=-1"):
        BackboneFinetuning(unfreeze_backbone_at_epoch=-1)
