"""Lightning's ``core.saving``: hyperparameters read from and written to a YAML file (``hparams.yaml``).

Example::

    save_hparams_to_yaml("hparams.yaml", {"lr": 0.1, "layers": [64, 64]})
    load_hparams_from_yaml("hparams.yaml")          # {"lr": 0.1, "layers": [64, 64]}
"""

from __future__ import annotations

import os
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

from framework.hparams import read_hparams_file, yaml_form
from framework.io.fs import exists, write_bytes_atomic
from framework.utilities.rank_zero import rank_zero_warn

__all__ = ["load_hparams_from_yaml", "save_hparams_to_yaml"]


def load_hparams_from_yaml(config_yaml: str | os.PathLike, use_omegaconf: bool = True) -> dict[str, Any]:
    """The hyperparameters in ``config_yaml`` (``{}``, with a warning, when there is no such file).

    Read with YAML's safe loader: a file naming Python objects is refused. ``use_omegaconf`` is accepted for
    Lightning's signature and has no effect here.
    """
    if not exists(config_yaml):
        rank_zero_warn(f"Missing Tags: {os.fspath(config_yaml)}.", RuntimeWarning)
        return {}
    return read_hparams_file(config_yaml)


def save_hparams_to_yaml(config_yaml: str | os.PathLike, hparams: Mapping[str, Any] | Namespace,
                         use_omegaconf: bool = True) -> None:
    """Write ``hparams`` (a dict or an ``argparse.Namespace``) to ``config_yaml`` atomically, as the loggers write
    ``hparams.yaml`` (numbers, strings, lists and dicts as they are; anything else as its ``repr``).
    ``use_omegaconf`` is accepted for Lightning's signature and has no effect here."""
    import yaml

    values = yaml_form(dict(vars(hparams) if isinstance(hparams, Namespace) else hparams))
    write_bytes_atomic(config_yaml, yaml.safe_dump(values).encode("utf-8"))
