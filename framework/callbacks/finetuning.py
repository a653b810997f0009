"""Finetuning: freeze part of the model before training and unfreeze it later with its own learning rate.

``BaseFinetuning`` holds the tools (``freeze``, ``make_trainable``, ``unfreeze_and_add_param_group``) and keeps
the parameter groups it adds in checkpoints, so a resumed run has them again; ``BackboneFinetuning`` is the
usual schedule for a Module with a ``backbone``.
"""

import logging
from collections.abc import Callable, Generator, Iterable
from typing import Any

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim import Optimizer

from framework.callbacks.base import Callback
from framework.checks import check_int
from framework.errors import MisconfigurationError
from framework.protocols import TrainerLike

log = logging.getLogger(__name__)

Modules = nn.Module | Iterable[nn.Module]


def multiplicative(epoch: int) -> float:
    """``BackboneFinetuning``'s default ``lambda_func``: the backbone's learning rate doubles every epoch."""
    return 2.0


class BaseFinetuning(Callback):
    """Subclass and implement ``freeze_before_training`` (called at setup, before the optimizers exist) and
    ``finetune_function`` (called at every training epoch's start, with each optimizer).

    Example::

        class UnfreezeAtEpoch(BaseFinetuning):
            def __init__(self, epoch=10):
                super().__init__()
                self.epoch = epoch

            def freeze_before_training(self, pl_module):
                self.freeze(pl_module.feature_extractor)

            def finetune_function(self, pl_module, current_epoch, optimizer):
                if current_epoch == self.epoch:
                    self.unfreeze_and_add_param_group(pl_module.feature_extractor, optimizer, lr=1e-4)
    """

    def __init__(self) -> None:
        # per optimizer: its parameter groups, with parameter names in place of the parameters
        self._internal_optimizer_metadata: dict[int, list[dict[str, Any]]] = {}
        self._restarting = False

    # -- the tools ---
    @staticmethod
    def flatten_modules(modules: Modules) -> list[nn.Module]:
        """The modules of ``modules`` that hold parameters themselves (leaves, and parents with their own)."""
        roots = [modules] if isinstance(modules, nn.Module) else list(modules)
        found: dict[int, nn.Module] = {}
        for root in roots:
            for module in root.modules():
                if not list(module.children()) or module._parameters:
                    found.setdefault(id(module), module)
        return list(found.values())

    @staticmethod
    def filter_params(modules: Modules, train_bn: bool = True,
                      requires_grad: bool = True) -> Generator[nn.Parameter, None, None]:
        """The parameters of ``modules`` whose ``requires_grad`` is ``requires_grad`` (batch norms' only with
        ``train_bn``)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and not train_bn:
                continue
            for parameter in module.parameters(recurse=False):
                if parameter.requires_grad == requires_grad:
                    yield parameter

    @staticmethod
    def make_trainable(modules: Modules) -> None:
        """Unfreeze every parameter of ``modules`` (batch norms track their statistics again)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm):
                module.track_running_stats = True
            for parameter in module.parameters(recurse=False):
                parameter.requires_grad = True

    @staticmethod
    def freeze_module(module: nn.Module) -> None:
        """Freeze ``module``'s own parameters (a batch norm also stops tracking its statistics)."""
        if isinstance(module, _BatchNorm):
            module.track_running_stats = False
        for parameter in module.parameters(recurse=False):
            parameter.requires_grad = False

    @staticmethod
    def freeze(modules: Modules, train_bn: bool = True) -> None:
        """Freeze ``modules``; with ``train_bn`` their batch norms stay trainable."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and train_bn:
                BaseFinetuning.make_trainable(module)
            else:
                BaseFinetuning.freeze_module(module)

    @staticmethod
    def filter_on_optimizer(optimizer: Optimizer, params: Iterable[nn.Parameter]) -> list[nn.Parameter]:
        """``params`` less those ``optimizer`` already has."""
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        return [p for p in params if id(p) not in held]

    @staticmethod
    def unfreeze_and_add_param_group(modules: Modules, optimizer: Optimizer, lr: float | None = None,
                                     initial_denom_lr: float = 10.0, train_bn: bool = True) -> None:
        """Unfreeze ``modules`` and give their parameters to ``optimizer`` as a new group (those it holds already
        are left out; no group is added when none is left).

        :param modules: a module, or several.
        :param optimizer: the optimizer that gets the new parameter group.
        :param lr: the group's learning rate; ``None`` (default): the first group's divided by ``initial_denom_lr``.
        :param initial_denom_lr: see ``lr`` (default 10.0).
        :param train_bn: True (default) puts batch norms' parameters in the group too; False leaves them out.
        """
        BaseFinetuning.make_trainable(modules)
        group_lr = optimizer.param_groups[0]["lr"] / initial_denom_lr if lr is None else float(lr)
        params = BaseFinetuning.filter_on_optimizer(
            optimizer, BaseFinetuning.filter_params(modules, train_bn=train_bn, requires_grad=True))
        if params:
            optimizer.add_param_group({"params": params, "lr": group_lr})

    # -- what subclasses implement ---
    def freeze_before_training(self, pl_module: Any) -> None:
        """Freeze what trains later (called at setup, before ``configure_optimizers``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement freeze_before_training(pl_module).")

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: Optimizer) -> None:
        """Unfreeze or change learning rates at ``epoch``'s start, for each optimizer."""
        raise NotImplementedError(f"{type(self).__name__} must implement finetune_function(pl_module, epoch, "
                                  "optimizer).")

    # -- hooks ---
    def setup(self, trainer: TrainerLike, pl_module: Any, stage: str) -> None:
        """Freeze before the optimizers are made."""
        if stage == "fit":
            self.freeze_before_training(pl_module)

    def on_fit_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """On a resumed run, give the optimizers back the groups added before the checkpoint (their saved state
        is loaded right after, and needs them)."""
        if not self._restarting:
            return
        named = dict(pl_module.named_parameters())
        for index, optimizer in enumerate(trainer.optimizers):
            saved = self._internal_optimizer_metadata.get(index)
            if saved is None:
                continue
            restored = [{**group, "params": [named[name] for name in group["params"]]} for group in saved]
            held = {id(p) for group in optimizer.param_groups for p in group["params"]}
            for group in restored[len(optimizer.param_groups):]:
                # unfrozen before the checkpoint; Lightning leaves them frozen, so they would never train again
                self.make_trainable([m for m in self.flatten_modules(pl_module)
                                     if any(p is q for p in m.parameters(recurse=False) for q in group["params"])])
                optimizer.add_param_group({**group, "params": [p for p in group["params"] if id(p) not in held]})
        self._restarting = False

    def on_train_epoch_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Run ``finetune_function`` with each optimizer, and remember the groups it added."""
        for index, optimizer in enumerate(trainer.optimizers):
            groups_before = len(optimizer.param_groups)
            self.finetune_function(pl_module, trainer.current_epoch, optimizer)
            if len(optimizer.param_groups) != groups_before or index in self._internal_optimizer_metadata:
                names = {id(p): name for name, p in pl_module.named_parameters()}
                self._internal_optimizer_metadata[index] = [
                    {**{k: v for k, v in group.items() if k != "params"},
                     "params": [names[id(p)] for p in group["params"]]}
                    for group in optimizer.param_groups
                ]

    def state_dict(self) -> dict[str, Any]:
        """The optimizers' parameter groups by parameter name."""
        return {"internal_optimizer_metadata": self._internal_optimizer_metadata}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Remember the saved groups, for ``on_fit_start`` to restore."""
        self._restarting = True
        self._internal_optimizer_metadata = dict(state_dict.get("internal_optimizer_metadata", {}))


class BackboneFinetuning(BaseFinetuning):
    """Train with ``pl_module.backbone`` frozen until ``unfreeze_backbone_at_epoch``; then train it too, as a
    parameter group of its own whose learning rate starts at ``backbone_initial_lr`` (default: the current
    one times ``backbone_initial_ratio_lr``) and is multiplied by ``lambda_func(epoch + 1)`` every epoch,
    never above the first group's with ``should_align``.

    :param unfreeze_backbone_at_epoch: the epoch (from 0) at whose start the backbone is unfrozen (default 10).
    :param lambda_func: ``epoch -> factor`` multiplying the backbone's learning rate at each later epoch's start;
        by default 2.0 (it doubles).
    :param backbone_initial_ratio_lr: the backbone's first learning rate as a fraction of the optimizer's first
        group's (default 0.1), unless ``backbone_initial_lr`` is given.
    :param backbone_initial_lr: the backbone's first learning rate; ``None`` (default): see the ratio.
    :param should_align: True (default) keeps the backbone's learning rate at most the first group's.
    :param initial_denom_lr: handed to ``unfreeze_and_add_param_group``, which uses it only without a learning
        rate: here it has no effect (default 10.0).
    :param train_bn: True (default) keeps the backbone's batch norms training while it is frozen; False freezes
        them with it, and their parameters stay out of the group added at the unfreeze.
    :param verbose: True logs both learning rates whenever the backbone's is set.
    :param rounding: the decimal places of those logged rates (default 12).

    Example::

        Trainer(callbacks=[BackboneFinetuning(unfreeze_backbone_at_epoch=5, lambda_func=lambda epoch: 1.5)])
    """

    def __init__(self, unfreeze_backbone_at_epoch: int = 10, lambda_func: Callable[[int], float] = multiplicative,
                 backbone_initial_ratio_lr: float = 1e-1, backbone_initial_lr: float | None = None,
                 should_align: bool = True, initial_denom_lr: float = 10.0, train_bn: bool = True,
                 verbose: bool = False, rounding: int = 12) -> None:
        super().__init__()
        check_int("BackboneFinetuning", "unfreeze_backbone_at_epoch", unfreeze_backbone_at_epoch, 0,
                  meaning=" (the epoch that unfreezes it)")
        self.unfreeze_backbone_at_epoch = unfreeze_backbone_at_epoch
        self.lambda_func = lambda_func
        self.backbone_initial_ratio_lr = backbone_initial_ratio_lr
        self.backbone_initial_lr = backbone_initial_lr
        self.should_align = should_align
        self.initial_denom_lr = initial_denom_lr
        self.train_bn = train_bn
        self.verbose = verbose
        self.rounding = rounding
        self.previous_backbone_lr: float | None = None

    def state_dict(self) -> dict[str, Any]:
        """The groups, and the backbone's learning rate so far."""
        return {**super().state_dict(), "previous_backbone_lr": self.previous_backbone_lr}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        self.previous_backbone_lr = state_dict.get("previous_backbone_lr")
        super().load_state_dict(state_dict)

    def setup(self, trainer: TrainerLike, pl_module: Any, stage: str) -> None:
        """Check there is a backbone, then freeze it.

        :raises MisconfigurationError: where the Module has no ``backbone`` attribute that is an ``nn.Module``.
        """
        if not isinstance(getattr(pl_module, "backbone", None), nn.Module):
            raise MisconfigurationError(f"BackboneFinetuning needs {type(pl_module).__name__}.backbone, an nn.Module "
                                        "(the part trained later); set self.backbone in __init__.")
        super().setup(trainer, pl_module, stage)

    def freeze_before_training(self, pl_module: Any) -> None:
        """Freeze the backbone."""
        self.freeze(pl_module.backbone, train_bn=self.train_bn)

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: Optimizer) -> None:
        """Unfreeze the backbone at ``unfreeze_backbone_at_epoch``, then move its learning rate each epoch."""
        current_lr = optimizer.param_groups[0]["lr"]
        if epoch == self.unfreeze_backbone_at_epoch:
            backbone_lr = (self.backbone_initial_lr if self.backbone_initial_lr is not None
                           else current_lr * self.backbone_initial_ratio_lr)
            self.unfreeze_and_add_param_group(pl_module.backbone, optimizer, backbone_lr, train_bn=self.train_bn,
                                              initial_denom_lr=self.initial_denom_lr)
        elif epoch > self.unfreeze_backbone_at_epoch and self.previous_backbone_lr is not None:
            backbone_lr = self.lambda_func(epoch + 1) * self.previous_backbone_lr
            if self.should_align and backbone_lr > current_lr:
                backbone_lr = current_lr
            optimizer.param_groups[-1]["lr"] = backbone_lr
        else:
            return
        self.previous_backbone_lr = backbone_lr
        if self.verbose:
            log.info(f"Current lr: {round(current_lr, self.rounding)}, "
                     f"Backbone lr: {round(backbone_lr, self.rounding)}")
