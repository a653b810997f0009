"""``import framework`` stays cheap: heavy optional modules load only when first used."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_import_does_not_load_tensorboard_yaml_or_tqdm():
    # torch itself may import some of these (it imports tqdm through torch.hub): only count
    # what importing framework adds on top of torch.
    code = (
        "import sys, torch\n"
        "names = ('tensorboard', 'yaml', 'tqdm', 'torchmetrics', 'fsspec', 'framework.accelerate')\n"
        "before = {m for m in names if m in sys.modules}\n"
        "import framework\n"
        "print(','.join(m for m in names if m in sys.modules and m not in before))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == ""


def test_the_wrappers_of_optional_packages_import_them_only_when_used():
    code = (
        "import sys\n"
        "import framework.loggers, framework.callbacks, framework.profilers, framework.tuner, framework.accelerate\n"
        "names = ('mlflow', 'wandb', 'rich', 'psutil', 'matplotlib', 'safetensors')\n"
        "print(','.join(m for m in names if m in sys.modules))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == ""


def test_public_names():
    import framework

    for name in ("Trainer", "Module", "DataModule", "Runtime", "seed_everything", "Callback"):
        assert hasattr(framework, name)


def test_a_lightning_name_says_what_it_is_called_here():
    import framework

    with pytest.raises(AttributeError, match=r"Lightning's Fabric is framework\.Runtime here"):
        framework.Fabric
    with pytest.raises(AttributeError, match=r"`from framework import Module as LightningModule`"):
        framework.LightningModule
    with pytest.raises(AttributeError, match="has no attribute 'Nonexistent'"):
        framework.Nonexistent
    assert not hasattr(framework, "Fabric")  # hasattr and getattr(default) still work


def test_the_package_alone_loads_neither_torch_nor_the_trainer_and_names_load_when_used():
    code = (
        "import sys, framework\n"
        "print('torch' in sys.modules, 'framework.trainer.trainer' in sys.modules)\n"
        "framework.Trainer, framework.callbacks.ModelCheckpoint\n"
        "print('framework.trainer.trainer' in sys.modules, 'framework.callbacks.model_checkpoint' in sys.modules)\n"
    )
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert printed == ["False", "False", "True", "True"]


@pytest.mark.parametrize("command", [["launch", "--help"], ["env"], ["config", "--help"]])
def test_the_launcher_and_env_commands_start_without_the_trainer(command):
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['framework', *{command!r}]\n"
        "try:\n"
        "    runpy.run_module('framework', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert exit.code in (0, None), exit.code\n"
        "print('TRAINER', 'framework.trainer.trainer' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "TRAINER False"
