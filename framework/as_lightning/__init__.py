"""The switch that makes Lightning's names framework's: ``lightning``, ``lightning.pytorch``,
``pytorch_lightning``, ``lightning.fabric`` and ``lightning_fabric``, with every submodule, for the user's code,
the libraries it imports and their tests.

Run any command under it (``python``, ``pytest``, ``torchrun``, ``srun``, ``framework launch``)::

    framework as-lightning python train.py --epochs 3
    framework as-lightning pytest tests/

or, in a notebook, before anything imports Lightning::

    import framework.as_lightning
    framework.as_lightning.enable()

Both put this package's ``stub_packages`` folder first on the import path, in the process and (through ``PYTHONPATH``)
in every process it starts: forked, spawned, torchrun's, SLURM's. That folder holds the three top-level
packages, which hand over to framework when imported, and their metadata at Lightning's version
(``LIGHTNING_VERSION``), so ``importlib.metadata.version("pytorch_lightning")`` answers too. Without the switch
nothing is on the path and an installed Lightning is untouched.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from framework.as_lightning.names import LIGHTNING_VERSION, TOP_LEVEL

#: The folder the switch puts first on the import path.
SITE = str(Path(__file__).parent / "stub_packages")
#: Set in every process under the switch, so that only the first one says it is on.
SWITCH_VARIABLE = "FRAMEWORK_AS_LIGHTNING"

__all__ = ["LIGHTNING_VERSION", "SITE", "SWITCH_VARIABLE", "announcement", "enable", "environment_with_switch"]


def announcement() -> str:
    """The one line the switch says when it is turned on."""
    return (f"framework as-lightning: {', '.join(TOP_LEVEL)} are framework here (matching Lightning "
            f"{LIGHTNING_VERSION}), in this process and every process it starts.")


def environment_with_switch(environ: dict[str, str] | os._Environ) -> dict[str, str]:
    """``environ`` with the switch on: ``SITE`` first on ``PYTHONPATH``, and ``SWITCH_VARIABLE`` set."""
    paths = [path for path in environ.get("PYTHONPATH", "").split(os.pathsep) if path and path != SITE]
    return {**environ, "PYTHONPATH": os.pathsep.join([SITE, *paths]), SWITCH_VARIABLE: "1"}


def enable() -> None:
    """Turn the switch on in this process and the processes it starts (say so once, on stderr).

    Lightning must not have been imported yet: what holds its objects would not hold framework's.
    """
    from framework.as_lightning.aliases import AliasModule, install_finder
    from framework.errors import MisconfigurationError

    imported = [name for name in TOP_LEVEL if name in sys.modules and not isinstance(sys.modules[name], AliasModule)]
    if imported:
        raise MisconfigurationError(
            f"framework.as_lightning.enable(): {imported[0]} was imported before the switch, so its objects are "
            "Lightning's. Call enable() before anything imports Lightning, or run the command under "
            "`framework as-lightning`."
        )
    if os.environ.get(SWITCH_VARIABLE) != "1":
        print(announcement(), file=sys.stderr)
    os.environ.update(environment_with_switch(os.environ))
    if SITE not in sys.path:
        sys.path.insert(0, SITE)
    install_finder()
