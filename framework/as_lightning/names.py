"""Which framework module answers for each Lightning module, and Lightning's names that framework spells otherwise.

Lightning's three spellings of one package are one here: ``pytorch_lightning.X`` is ``lightning.pytorch.X`` and
``lightning_fabric.X`` is ``lightning.fabric.X`` (``canonical``). A Lightning module not in ``MODULES`` answers
through its nearest listed parent, so ``lightning.pytorch.callbacks.model_checkpoint.ModelCheckpoint`` is found
in ``framework.callbacks`` as Lightning's ``lightning.pytorch.callbacks.ModelCheckpoint`` is.
"""

from __future__ import annotations

#: The Lightning release whose behaviour framework matches: what ``lightning.__version__`` and the packages'
#: metadata report under the switch (libraries branch on it).
LIGHTNING_VERSION = "2.6.6"

#: The top-level names the switch takes over.
TOP_LEVEL = ("lightning", "pytorch_lightning", "lightning_fabric")

_PL = "lightning.pytorch"
_LF = "lightning.fabric"

#: Lightning module -> the framework modules that answer for it, searched in order.
MODULES: dict[str, tuple[str, ...]] = {
    "lightning": ("framework", "framework.runtime"),
    _PL: ("framework",),
    f"{_PL}.callbacks": ("framework.callbacks",),
    f"{_PL}.demos": ("framework.as_lightning.boring_classes",),
    f"{_PL}.demos.boring_classes": ("framework.as_lightning.boring_classes",),
    f"{_PL}.core": ("framework", "framework.hparams"),
    f"{_PL}.core.module": ("framework.module",),
    f"{_PL}.core.datamodule": ("framework.datamodule",),
    f"{_PL}.core.hooks": ("framework.module",),
    f"{_PL}.core.mixins": ("framework.hparams",),
    f"{_PL}.core.saving": ("framework.utilities.saving",),
    f"{_PL}.core.optimizer": ("framework.trainer.optimizer_proxy",),
    f"{_PL}.cli": ("framework.as_lightning.cli",),
    f"{_PL}.accelerators": ("framework.as_lightning.accelerators",),
    f"{_PL}.accelerators.accelerator": ("framework.as_lightning.accelerators",),
    f"{_PL}.loggers": ("framework.loggers",),
    f"{_PL}.loggers.logger": ("framework.loggers.base", "framework.loggers"),
    f"{_PL}.profilers": ("framework.profilers",),
    f"{_PL}.strategies": ("framework.strategies",),
    f"{_PL}.plugins": ("framework.plugins",),
    f"{_PL}.plugins.io": ("framework.plugins.io",),
    f"{_PL}.plugins.io.wrapper": ("framework.as_lightning.checkpoint_io_wrapper",),
    f"{_PL}.plugins.precision": ("framework.plugins.precision",),
    f"{_PL}.plugins.environments": ("framework.plugins.environments",),
    f"{_PL}.trainer": ("framework.trainer",),
    f"{_PL}.trainer.states": ("framework.trainer.state",),
    f"{_PL}.tuner": ("framework.tuner",),
    f"{_PL}.tuner.lr_finder": ("framework.tuner.lr_finder",),
    f"{_PL}.tuner.tuning": ("framework.tuner.tuning",),
    f"{_PL}.utilities": ("framework.utilities", "framework.utilities.parsing", "framework.as_lightning.enums",
                         "framework.as_lightning.throughput", "framework.as_lightning.model_helpers"),
    f"{_PL}.utilities.memory": ("framework.utilities.memory",),
    f"{_PL}.utilities.migration": ("framework.as_lightning.migration",),
    f"{_PL}.utilities.imports": ("framework.as_lightning.imports",),
    f"{_PL}.utilities.data": ("framework.as_lightning.data",),
    f"{_PL}.utilities.enums": ("framework.as_lightning.enums",),
    f"{_PL}.utilities.rank_zero": ("framework.utilities.rank_zero",),
    f"{_PL}.utilities.types": ("framework.utilities.types",),
    f"{_PL}.utilities.parsing": ("framework.utilities.parsing",),
    f"{_PL}.utilities.seed": ("framework.seed",),
    f"{_PL}.utilities.model_summary": ("framework.utilities.model_summary",),
    f"{_PL}.utilities.combined_loader": ("framework.utilities.combined_loader",),
    f"{_PL}.utilities.exceptions": ("framework.utilities.exceptions",),
    f"{_PL}.utilities.warnings": ("framework.utilities.warnings",),
    f"{_PL}.utilities.cloud_io": ("framework.utilities.cloud_io",),
    f"{_PL}.utilities.grads": ("framework.utilities.grads",),
    f"{_PL}.utilities.model_helpers": ("framework.as_lightning.model_helpers",),
    f"{_PL}.utilities.apply_func": ("framework.utilities.apply_func",),
    f"{_PL}.utilities.deepspeed": ("framework.strategies.deepspeed_checkpoint",),
    _LF: ("framework.runtime", "framework"),
    f"{_LF}.utilities": ("framework.utilities", "framework.as_lightning.enums", "framework.as_lightning.throughput"),
    f"{_LF}.utilities.data": ("framework.as_lightning.data", "framework.hparams"),
    f"{_LF}.utilities.enums": ("framework.as_lightning.enums",),
    f"{_LF}.utilities.logger": ("framework.as_lightning.logger_helpers",),
    f"{_LF}.utilities.throughput": ("framework.as_lightning.throughput",),
    f"{_LF}.utilities.warnings": ("framework.utilities.warnings",),
    f"{_LF}.accelerators": ("framework.as_lightning.accelerators",),
    f"{_LF}.utilities.seed": ("framework.seed",),
    f"{_LF}.utilities.rank_zero": ("framework.utilities.rank_zero",),
    f"{_LF}.utilities.types": ("framework.utilities.types",),
    f"{_LF}.utilities.cloud_io": ("framework.utilities.cloud_io",),
    f"{_LF}.utilities.apply_func": ("framework.utilities.apply_func",),
    f"{_LF}.utilities.exceptions": ("framework.utilities.exceptions",),
    f"{_LF}.plugins": ("framework.plugins",),
    f"{_LF}.plugins.io": ("framework.plugins.io",),
    f"{_LF}.plugins.precision": ("framework.plugins.precision",),
    f"{_LF}.plugins.environments": ("framework.plugins.environments",),
    f"{_LF}.strategies": ("framework.strategies",),
    f"{_LF}.wrappers": ("framework.runtime.wrappers",),
    f"{_LF}.loggers": ("framework.loggers",),
    f"{_LF}.loggers.logger": ("framework.loggers.base", "framework.loggers"),
}

#: Lightning's name -> framework's, wherever the name is looked up.
RENAMED: dict[str, str] = {
    "LightningModule": "Module",
    "LightningDataModule": "DataModule",
    "Fabric": "Runtime",
    "_LRFinder": "LRFinder",
    "LightningOptimizer": "OptimizerProxy",
    "_FabricModule": "RuntimeModule",
    "_FabricOptimizer": "RuntimeOptimizer",
    "_FabricDataLoader": "RuntimeDataLoader",
}

#: Packages whose ``__version__`` is Lightning's.
VERSIONED = frozenset({*TOP_LEVEL, _PL, _LF})


def canonical(name: str) -> str:
    """``name`` in the ``lightning.`` spelling: ``pytorch_lightning.callbacks`` -> ``lightning.pytorch.callbacks``."""
    for short, long in (("pytorch_lightning", _PL), ("lightning_fabric", _LF)):
        if name == short or name.startswith(short + "."):
            return long + name[len(short):]
    return name


def is_lightning_name(name: str) -> bool:
    """Whether the module ``name`` is one the switch takes over."""
    return name.partition(".")[0] in TOP_LEVEL


def sources_of(name: str) -> tuple[str, tuple[str, ...]]:
    """The listed Lightning module that answers for ``name`` (itself or its nearest listed parent) and its
    framework modules; a module under no listed one has none."""
    listed = canonical(name)
    while listed and listed not in MODULES:
        listed = listed.rpartition(".")[0]
    return listed, MODULES.get(listed, ())
