"""``ModelPruning``: prune weights during training with ``torch.nn.utils.prune``."""

import copy
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn.utils import prune

from framework import console
from framework.callbacks.base import Callback
from framework.errors import MisconfigurationError, describe
from framework.protocols import TrainerLike

_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
_FUNCTIONS = {"l1_unstructured": prune.l1_unstructured, "random_unstructured": prune.random_unstructured,
              "ln_structured": prune.ln_structured, "random_structured": prune.random_structured}
_GLOBAL_METHODS = {"l1_unstructured": prune.L1Unstructured, "random_unstructured": prune.RandomUnstructured}


class ModelPruning(Callback):
    """Prune ``amount`` (a fraction, a count, or a function of the epoch) of the weights at each training epoch's
    end (or validation's, with ``prune_on_train_epoch_end=False``), with ``pruning_fn``: a name of
    ``torch.nn.utils.prune`` ("l1_unstructured", "random_unstructured", "ln_structured", "random_structured"),
    a ``BasePruningMethod`` class, or a function ``(module, name, amount)``.

    ``parameters_to_prune`` (pairs of module and parameter name; by default every ``parameter_names`` of every
    layer, "weight" and "bias") are pruned together (``use_global_unstructured``) or layer by layer. With
    ``use_lottery_ticket_hypothesis`` the weights left are reset to their values when training started
    (``resample_parameters``: drawn anew from those values). With ``make_pruning_permanent`` checkpoints hold
    the pruned weights as plain parameters, and fit ends with the pruning made permanent.

    :param pruning_fn: ``"l1_unstructured"``, ``"random_unstructured"``, ``"ln_structured"``,
        ``"random_structured"``, a ``BasePruningMethod`` class, or a function ``(module, name, amount)``.
    :param parameters_to_prune: ``(module, parameter name)`` pairs of the model; empty (default): every layer's
        parameters named in ``parameter_names``.
    :param parameter_names: the names pruned when ``parameters_to_prune`` is empty; ``None``: ``weight`` and ``bias``.
    :param use_global_unstructured: True (default) prunes all the parameters together, which needs an
        unstructured method; False prunes each on its own.
    :param amount: a fraction of the values (float), a number of them (int), or ``epoch -> amount``; 0 prunes
        nothing. Default 0.5.
    :param apply_pruning: whether to prune this epoch: a bool (default True) or ``epoch -> bool``.
    :param make_pruning_permanent: True (default) as above; False keeps the pruning reparametrization (masks)
        at the end and in checkpoints.
    :param use_lottery_ticket_hypothesis: whether to reset the weights left after pruning: a bool (default
        True) or ``epoch -> bool``.
    :param resample_parameters: True resets them to their starting values shuffled (default False).
    :param pruning_dim: the dimension structured methods prune along; required by them (default ``None``).
    :param pruning_norm: the norm of ``"ln_structured"`` (``1``, ``2``...); required by it (default ``None``).
    :param verbose: non-zero logs how many of the pruned parameters' values are zero after each pruning.
    :param prune_on_train_epoch_end: True (default) prunes at each training epoch's end, False after validation.
    :raises MisconfigurationError: where ``pruning_fn`` is an unknown name or neither a name nor callable; where a
        structured method lacks ``pruning_dim`` (or, for "ln_structured", ``pruning_norm``); or where
        ``use_global_unstructured`` is set with a method that cannot prune globally.

    Example::

        Trainer(callbacks=[ModelPruning("l1_unstructured", amount=lambda epoch: 0.2 if epoch % 2 else 0.0)])
    """

    #: The parameters pruned in every layer that has them when neither ``parameters_to_prune`` nor
    #: ``parameter_names`` is given.
    PARAMETER_NAMES = ("weight", "bias")

    def __init__(self, pruning_fn: Callable | str, parameters_to_prune: Sequence[tuple[nn.Module, str]] = (),
                 parameter_names: list[str] | None = None, use_global_unstructured: bool = True,
                 amount: int | float | Callable[[int], int | float] = 0.5,
                 apply_pruning: bool | Callable[[int], bool] = True, make_pruning_permanent: bool = True,
                 use_lottery_ticket_hypothesis: bool | Callable[[int], bool] = True,
                 resample_parameters: bool = False, pruning_dim: int | None = None, pruning_norm: int | None = None,
                 verbose: int = 0, prune_on_train_epoch_end: bool = True) -> None:
        structured = isinstance(pruning_fn, str) and pruning_fn.endswith("_structured")
        if isinstance(pruning_fn, str) and pruning_fn not in _FUNCTIONS:
            raise MisconfigurationError(f"ModelPruning(pruning_fn={describe(pruning_fn)}): accepted one of "
                                        f"{sorted(_FUNCTIONS)}, a BasePruningMethod class or a function.")
        if structured and (pruning_dim is None or (pruning_fn == "ln_structured" and pruning_norm is None)):
            raise MisconfigurationError(f"ModelPruning({pruning_fn!r}) prunes structures: give pruning_dim (and, for "
                                        "'ln_structured', pruning_norm).")
        if use_global_unstructured and (structured or (isinstance(pruning_fn, str)
                                                       and pruning_fn not in _GLOBAL_METHODS)):
            raise MisconfigurationError(f"ModelPruning(pruning_fn={pruning_fn!r}, use_global_unstructured=True): "
                                        "global pruning needs an unstructured method; pass "
                                        "use_global_unstructured=False to prune layer by layer.")
        if not isinstance(pruning_fn, str) and not callable(pruning_fn):
            raise MisconfigurationError(f"ModelPruning(pruning_fn={describe(pruning_fn)}): accepted a name, a "
                                        "BasePruningMethod class or a function.")
        self._pruning_fn = pruning_fn
        self._given_parameters = list(parameters_to_prune)
        self._parameter_names = parameter_names or list(self.PARAMETER_NAMES)
        self._use_global = use_global_unstructured
        self.amount = amount
        self._apply_pruning = apply_pruning
        self._make_permanent = make_pruning_permanent
        self._lottery_ticket = use_lottery_ticket_hypothesis
        self._resample = resample_parameters
        self._dim, self._norm = pruning_dim, pruning_norm
        self._verbose = verbose
        self._on_train_epoch_end = prune_on_train_epoch_end
        self._parameters_to_prune: list[tuple[nn.Module, str]] = []
        self._initial: dict[int, nn.Module] = {}

    def setup(self, trainer: TrainerLike, pl_module: Any, stage: str) -> None:
        """Find what to prune, and keep its starting values for the lottery ticket."""
        if stage != "fit":
            return
        self._parameters_to_prune = self._sanitized(pl_module)
        self._initial = {id(module): copy.deepcopy(module) for module, _ in self._parameters_to_prune}

    def _sanitized(self, pl_module: nn.Module) -> list[tuple[nn.Module, str]]:
        layers = [m for m in pl_module.modules() if m is not pl_module and not isinstance(m, _CONTAINERS)]
        if not self._given_parameters:
            return [(module, name) for name in self._parameter_names for module in layers
                    if isinstance(getattr(module, name, None), nn.Parameter)]
        missing = [(type(module).__name__, name) for module, name in self._given_parameters
                   if not any(module is layer for layer in layers) or not hasattr(module, name)]
        if missing:
            raise MisconfigurationError(f"ModelPruning(parameters_to_prune=...): not in the model: {missing}.")
        return list(self._given_parameters)

    def on_train_epoch_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Prune, when it happens at the training epoch's end."""
        if self._on_train_epoch_end:
            self._run(trainer.current_epoch)

    def on_validation_epoch_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Prune, when it happens after validation."""
        if not self._on_train_epoch_end and not trainer.sanity_checking and trainer.state.fn == "fit":
            self._run(trainer.current_epoch)

    def _run(self, epoch: int) -> None:
        prune_now = self._apply_pruning(epoch) if callable(self._apply_pruning) else self._apply_pruning
        amount = self.amount(epoch) if callable(self.amount) else self.amount
        if not prune_now or not amount:
            return
        self.apply_pruning(amount)
        if self._lottery_ticket(epoch) if callable(self._lottery_ticket) else self._lottery_ticket:
            self.apply_lottery_ticket_hypothesis()

    def apply_pruning(self, amount: int | float) -> None:
        """Prune ``amount`` of the chosen parameters (globally or layer by layer)."""
        if self._use_global:
            method = _GLOBAL_METHODS.get(self._pruning_fn, self._pruning_fn)
            prune.global_unstructured(self._parameters_to_prune, pruning_method=method, amount=amount)
        else:
            for module, name in self._parameters_to_prune:
                self._prune_one(module, name, amount)
        if self._verbose:
            zeros = sum(int((getattr(m, n) == 0).sum()) for m, n in self._parameters_to_prune)
            total = sum(getattr(m, n).numel() for m, n in self._parameters_to_prune)
            console.info(f"Applied `{getattr(self._pruning_fn, '__name__', self._pruning_fn)}`. Pruned: "
                         f"{zeros}/{total} ({100.0 * zeros / max(total, 1):.2f}%)")

    def _prune_one(self, module: nn.Module, name: str, amount: int | float) -> None:
        function = self._pruning_fn
        if isinstance(function, str):
            extra = {"dim": self._dim} if function.endswith("_structured") else {}
            if function == "ln_structured":
                extra["n"] = self._norm
            _FUNCTIONS[function](module, name, amount=amount, **extra)
        elif inspect.isclass(function) and issubclass(function, prune.BasePruningMethod):
            function.apply(module, name, amount=amount)
        else:
            function(module, name, amount)

    def apply_lottery_ticket_hypothesis(self) -> None:
        """Reset the weights left to their starting values (or values drawn from them)."""
        for module, name in self._parameters_to_prune:
            start = getattr(self._initial[id(module)], name).detach()
            if self._resample:
                start = start.flatten()[torch.randperm(start.numel())].view_as(start)
            original = getattr(module, f"{name}_orig", None)
            target = original if original is not None else getattr(module, name)
            with torch.no_grad():
                target.copy_(start.to(target.device))
            if original is not None:  # the masked view, as the next forward would compute it
                setattr(module, name, original * getattr(module, f"{name}_mask"))

    def make_pruning_permanent(self, pl_module: nn.Module) -> None:
        """Remove the pruning reparametrization: the masked weights become the parameters."""
        for module in pl_module.modules():
            for hook in list(module._forward_pre_hooks.values()):
                if isinstance(hook, prune.BasePruningMethod):
                    prune.remove(module, hook._tensor_name)

    def on_train_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """End with the pruning made permanent."""
        if self._make_permanent:
            self.make_pruning_permanent(pl_module)

    def on_save_checkpoint(self, trainer: TrainerLike, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        """Save the pruned weights as plain parameters (training goes on with the masks)."""
        if not self._make_permanent or "state_dict" not in checkpoint:
            return
        weights = dict(checkpoint["state_dict"])
        for masked in [key[:-len("_mask")] for key in weights if key.endswith("_mask")]:
            original, mask = weights.pop(masked + "_orig"), weights.pop(masked + "_mask")
            weights[masked] = mask.to(original.dtype) * original
        checkpoint["state_dict"] = weights
