"""Which submodules FSDP shards as units of their own (the auto-wrap policy), and activation checkpointing."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torch import nn

from framework.errors import MisconfigurationError, describe

# A submodule outside any container becomes a unit of its own from this many parameters on.
BLOCK_PARAMETERS = 1_000_000

WrapPolicy = Callable[[nn.Module], bool]


def wrap_policy(policy: Any, argument: str = "auto_wrap_policy") -> WrapPolicy | None:
    """``FSDPStrategy(auto_wrap_policy=...)`` as a predicate on submodules; None: only the whole model is one unit.

    Accepted: ``"auto"`` (``default_blocks``), a set/list of module classes, a callable
    ``fn(module) -> bool``, or a callable in FSDP1's form ``fn(module, recurse, nonwrapped_numel)``
    (``functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})``, as
    Lightning scripts pass it), or None.
    """
    if policy is None or policy == "auto":
        return None if policy is None else _AUTO
    if isinstance(policy, (set, frozenset, list, tuple)) and policy and all(isinstance(c, type) for c in policy):
        classes = tuple(policy)
        return lambda module: isinstance(module, classes)
    if isinstance(policy, type) and issubclass(policy, nn.Module):
        return lambda module: isinstance(module, policy)
    if callable(policy):
        if _takes_three(policy):  # FSDP1's form: decide for this module alone (recurse=False)
            return lambda module: bool(policy(module=module, recurse=False,
                                              nonwrapped_numel=sum(p.numel() for p in module.parameters())))
        return lambda module: bool(policy(module))
    raise MisconfigurationError(
        f"FSDPStrategy({argument}={describe(policy)}) is not understood. Accepted: 'auto' (one unit per "
        "block), a set of module classes ({Block}), a callable module -> bool, or None (the whole model is one unit)."
    )


def _AUTO(module: nn.Module) -> bool:  # noqa: N802 - a marker compared by identity
    raise AssertionError("the auto policy is applied by default_blocks, not called")


def units_to_shard(model: nn.Module, policy: WrapPolicy | None) -> list[nn.Module]:
    """The submodules of ``model`` to shard on their own, innermost first (fully_shard's order); ``model``
    itself is not among them."""
    if policy is None:
        return []
    chosen = default_blocks(model) if policy is _AUTO else [m for m in model.modules() if m is not model and policy(m)]
    depth = {module: name.count(".") for name, module in model.named_modules()}
    return sorted(chosen, key=lambda module: -depth[module])


def default_blocks(model: nn.Module) -> list[nn.Module]:
    """The blocks of ``model``: each child of a ``ModuleList``/``Sequential`` that holds parameters, and each
    other submodule of at least ``BLOCK_PARAMETERS`` parameters; blocks are not searched further.

    A transformer's layers, a CNN's stages and an MLP's layers come out as blocks, so each is
    gathered only while it computes.
    """
    blocks: list[nn.Module] = []

    def search(module: nn.Module) -> None:
        container = isinstance(module, (nn.ModuleList, nn.Sequential))
        for child in module.children():
            size = sum(p.numel() for p in child.parameters())
            if size and (container or (size >= BLOCK_PARAMETERS and not _is_container(child))):
                blocks.append(child)
            else:
                search(child)

    search(model)
    return blocks


def _is_container(module: nn.Module) -> bool:
    return isinstance(module, (nn.ModuleList, nn.Sequential, nn.ModuleDict))


def apply_checkpointing(model: nn.Module, policy: Any) -> list[nn.Module]:
    """Have the submodules ``policy`` picks recompute their activations in backward instead of keeping them
    from forward; the modules made so, outermost first. ``policy`` takes ``wrap_policy``'s forms.

    Each picked module's ``forward`` runs under ``torch.utils.checkpoint`` non-reentrant, set on the
    module itself, so parameter names, and with them checkpoints, stay as they are (``checkpoint_wrapper``
    would add a prefix), the hooks ``fully_shard`` puts around the call still run once, and
    ``torch.compile`` traces it as one of its own operations. A module inside a picked one is
    recomputed with it and is not checkpointed again; a module checkpointed already (also by
    ``torch.distributed._composable.checkpoint``) is left as it is.

    Example::

        apply_checkpointing(model, {Block})       # or: lambda module: isinstance(module, Block)
    """
    if policy is None:
        return []
    predicate = wrap_policy(policy, "activation_checkpointing_policy")
    picked = default_blocks(model) if predicate is _AUTO else [m for m in model.modules()
                                                                if m is not model and predicate(m)]
    chosen = _outermost(model, picked)
    for module in chosen:
        if not _is_checkpointed(module):
            module.forward = RecomputedForward(module)
    return chosen


class RecomputedForward:
    """``module``'s own ``forward`` run under ``torch.utils.checkpoint`` (non-reentrant). An object holding the
    module, not a closure: a deep copy (weight averaging) or a pickle gets one calling the copy."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(type(self.module).forward, self.module, *args, use_reentrant=False, **kwargs)


def _outermost(model: nn.Module, picked: list[nn.Module]) -> list[nn.Module]:
    """The modules of ``picked`` not inside another of them, in ``model.modules()`` order."""
    wanted, covered, outermost = set(picked), set(), []
    for module in model.modules():  # a parent comes before its children
        if module in wanted and module not in covered:
            outermost.append(module)
            covered.update(module.modules())
    return outermost


def _is_checkpointed(module: nn.Module) -> bool:
    from torch.distributed._composable import _get_registry

    by_hooks = "checkpoint" in (_get_registry(module) or {})  # torch.distributed._composable.checkpoint
    return isinstance(module.__dict__.get("forward"), RecomputedForward) or by_hooks


def _takes_three(function: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return {"module", "recurse", "nonwrapped_numel"} <= set(parameters)
