"""Each hook's description is written once: on the ``Module`` method that declares it, or on ``Callback``'s for a
hook only callbacks have. ``document_hooks`` shows that text on ``Callback`` and ``DataModule`` too, with their own
arguments, and ends every hook's text with what the hook table (:mod:`framework.hooks`) says of it: where it runs,
in which order beside the other owners' implementations, and whether ``log`` works in it. The loops read the same
table, so the reference cannot disagree with them.

Example::

    @document_hooks(Owner.CALLBACK, written_on=ModuleHooks)
    class Callback: ...
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any, TypeVar

from framework.hooks import Hook, Owner, Trait

Documented = TypeVar("Documented", bound=type)

# Where a hook runs, when not on every process.
_WHERE = {
    Hook.PREPARE_DATA: "on one process per node (local rank 0), or on global rank 0 alone when "
                       "``prepare_data_per_node`` is False; the other processes wait until it returns",
    Hook.ON_EXCEPTION: "on each process whose run raised",
}
_FIELD = re.compile(r"^:(param|returns?|raises?|type|rtype)\b", re.MULTILINE)
_RETURNS = re.compile(r"^:returns?:.*(?:\n(?![:\n]).*)*\n?", re.MULTILINE)
_CALLBACK_ARGUMENTS = ":param trainer: the Trainer running the hook.\n:param pl_module: the Module being run.\n"


def document_hooks(owner: Owner, written_on: type | None = None) -> Callable[[Documented], Documented]:
    """A class decorator: every hook of ``owner`` the class defines gets its description and the table's facts.

    :param owner: whose hooks the class holds: ``Owner.MODULE``, ``Owner.CALLBACK`` or ``Owner.DATAMODULE``.
    :param written_on: the class whose hook text a hook without a docstring of its own shows (the Module's
        ``ModuleHooks``); ``None``: every hook must have its own.
    """

    def document(cls: Documented) -> Documented:
        for hook in Hook:
            function = _function(cls, hook.value)
            if owner not in hook.owners or function is None:
                continue
            text = hook_text(function)
            if not text and written_on is not None:
                text = hook_text(_function(written_on, hook.value))
                if owner is Owner.CALLBACK:
                    text = _for_callbacks(text)
            function.__hook_text__ = text
            function.__doc__ = _with_facts(text, _facts(hook, owner))
        return cls

    return document


def hook_text(function: Any) -> str:
    """The description written for a hook (without the table's facts); ``""`` where none was written."""
    if function is None:
        return ""
    return getattr(function, "__hook_text__", None) or inspect.cleandoc(function.__doc__ or "")


def _function(cls: type | None, name: str) -> Any:
    """The function ``cls`` itself defines (or a private mixin of its own module family) for the hook ``name``."""
    if cls is None:
        return None
    for klass in cls.__mro__:
        if name in vars(klass):
            member = vars(klass)[name]
            return member if inspect.isfunction(member) and klass.__module__.startswith("framework") else None
    return None


def _for_callbacks(text: str) -> str:
    """The Module's text for a callback: ``trainer`` and ``pl_module`` come first, no return value counts, and
    the Module's examples (``self`` is the Module there) are left out."""
    text = _RETURNS.sub("", _without_examples(text)).rstrip()
    match = _FIELD.search(text)
    if match is None:
        return f"{text}\n\n{_CALLBACK_ARGUMENTS}".rstrip()
    return f"{text[:match.start()]}{_CALLBACK_ARGUMENTS}{text[match.start():]}"


def _without_examples(text: str) -> str:
    kept, in_example = [], False
    for line in text.splitlines():
        if line.strip() == "Example::":
            in_example = True
        elif in_example and line and not line.startswith(" "):
            in_example = False
        if not in_example:
            kept.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


def _with_facts(text: str, facts: str) -> str:
    """``facts`` as a paragraph after the description and before its fields (``:param:`` ...)."""
    match = _FIELD.search(text)
    if match is None:
        return f"{text}\n\n{facts}".lstrip()
    return f"{text[:match.start()].rstrip()}\n\n{facts}\n\n{text[match.start():]}".lstrip()


def _facts(hook: Hook, owner: Owner) -> str:
    name = hook.value
    sentences = [f"Runs {_WHERE.get(hook, 'on every process')}."]
    order = _order(hook, owner)
    if order:
        sentences.append(order)
    if owner is not Owner.DATAMODULE:
        logger = "pl_module.log" if owner is Owner.CALLBACK else "self.log"
        sentences.append(f"``{logger}`` works here." if hook.may_log
                         else f"``{logger}`` raises a ``MisconfigurationError`` here ({name} keeps no results).")
    return " ".join(sentences)


def _order(hook: Hook, owner: Owner) -> str:
    name = hook.value
    if Trait.BATCH_TRANSFER in hook.traits:
        return ("A DataModule's override replaces the Module's." if owner is Owner.DATAMODULE
                else "Where the DataModule overrides it, the DataModule's runs instead of this one.")
    if owner is Owner.CALLBACK:
        if not hook.for_module:
            return "Only callbacks have this hook."
        if hook is Hook.ON_LOAD_CHECKPOINT:
            return f"Callbacks run it after the Module's ``{name}`` (and after the weights are loaded)."
        if name.endswith("_epoch_end") and hook.may_log:  # train, validation, test: the loops' call_epoch_end
            return (f"Callbacks run it in the order given, before the Module's ``{name}``; those with "
                    "``reads_epoch_metrics`` (checkpointing, early stopping) after it, so they see what it logs.")
        return f"Callbacks run it in the order given (checkpoint callbacks last), before the Module's ``{name}``."
    if owner is Owner.DATAMODULE:
        after = "the callbacks' and the Module's" if hook.for_callbacks else "the Module's"
        return f"Runs before {after} ``{name}``."
    before = [who for who, owned in (("the DataModule's", hook.for_datamodule), ("the callbacks'", hook.for_callbacks))
              if owned]
    if hook is Hook.ON_LOAD_CHECKPOINT:
        return "Runs before the callbacks' and before the weights are loaded."
    return f"Runs after {' and '.join(before)} ``{name}``." if before else ""
