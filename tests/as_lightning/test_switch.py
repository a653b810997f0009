"""``framework as-lightning``: Lightning's names resolve to framework in every process of a command (the user's
script, a library's modules and its tests, forked, spawned and torchrun-started ranks), it says so once, and
without it nothing is aliased and an installed Lightning is what imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from framework.as_lightning import SITE
from framework.as_lightning.names import LIGHTNING_VERSION, MODULES

REPOSITORY = Path(__file__).resolve().parents[2]
LIBRARY = Path(__file__).resolve().parent / "shaped_library"
FRAMEWORK = [sys.executable, "-m", "framework"]
ANNOUNCED = "framework as-lightning: lightning, pytorch_lightning, lightning_fabric are framework here"


def run(command: list[str], cwd: Path, extra_path: list[Path] = (), timeout: float = 240,
        ) -> subprocess.CompletedProcess:
    """``command`` in ``cwd``, with the repository and ``extra_path`` on PYTHONPATH and the switch off to start."""
    environ = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "FRAMEWORK_AS_LIGHTNING")}
    environ["PYTHONPATH"] = os.pathsep.join([*map(str, extra_path), str(REPOSITORY)])
    return subprocess.run(command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout)


def script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(text))
    return path


def test_names_resolve_to_frameworks_own_objects_under_every_spelling(tmp_path):
    path = script(tmp_path, """
        import importlib.metadata, json
        import lightning as L, pytorch_lightning as pl, lightning_fabric
        import lightning.pytorch.callbacks.model_checkpoint as deep
        from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
        from pytorch_lightning.utilities.parsing import get_init_args
        import framework, framework.plugins, framework.utilities.parsing
        print(json.dumps({
            "same": [L.LightningModule is pl.LightningModule is L.pytorch.LightningModule is framework.Module,
                     pl.Trainer is framework.Trainer, L.Fabric is lightning_fabric.Fabric is framework.Runtime,
                     deep.ModelCheckpoint is framework.callbacks.ModelCheckpoint,
                     TorchCheckpointIO is framework.plugins.TorchCheckpointIO,
                     get_init_args is framework.utilities.parsing.get_init_args,
                     pl.callbacks.EarlyStopping is framework.callbacks.EarlyStopping],
            "versions": [L.__version__, pl.__version__, lightning_fabric.__version__, L.pytorch.__version__,
                         importlib.metadata.version("pytorch_lightning"), importlib.metadata.version("lightning"),
                         importlib.metadata.version("lightning-fabric")],
            "ours": framework.__version__}))
    """)
    done = run(FRAMEWORK + ["as-lightning", str(path)], tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(found["same"]) and found["versions"] == [LIGHTNING_VERSION] * 7 and found["ours"] != LIGHTNING_VERSION
    assert done.stderr.count(ANNOUNCED) == 1


def test_an_unmapped_name_imports_and_fails_only_when_used_naming_itself(tmp_path):
    path = script(tmp_path, """
        from lightning.pytorch.cli import LightningCLI
        from pytorch_lightning.loggers import NeptuneLogger
        import pytorch_lightning.some_module_lightning_never_had as odd
        assert not isinstance(object(), LightningCLI)
        try:
            NeptuneLogger(project="x")
        except NotImplementedError as error:
            print(error)
        try:
            class Mine(LightningCLI):
                pass
        except NotImplementedError as error:
            print(error)
    """)
    done = run(FRAMEWORK + ["as-lightning", str(path)], tmp_path)
    assert done.returncode == 0, done.stderr
    called, subclassed = done.stdout.strip().splitlines()
    assert called.startswith("pytorch_lightning.loggers.NeptuneLogger (called) is not provided by framework")
    assert "libraries-built-on-lightning.md" in called
    assert subclassed.startswith("lightning.pytorch.cli.LightningCLI (subclassed) is not provided")


def test_every_framework_module_the_table_names_exists():
    import importlib

    for lightning_module, sources in MODULES.items():
        for source in sources:
            assert importlib.import_module(source), f"{lightning_module} -> {source}"


def test_without_the_switch_nothing_is_aliased_and_an_installed_lightning_imports(tmp_path):
    installed = tmp_path / "site"
    (installed / "pytorch_lightning").mkdir(parents=True)
    (installed / "pytorch_lightning" / "__init__.py").write_text("__version__ = 'the real one'\n")
    path = script(tmp_path, """
        import sys
        import framework, framework.trainer
        import pytorch_lightning
        print(pytorch_lightning.__version__, any(type(f).__name__ == "LightningFinder" for f in sys.meta_path))
    """)
    plain = run([sys.executable, str(path)], tmp_path, extra_path=[installed])
    assert plain.stdout.split() == ["the", "real", "one", "False"], plain.stderr
    switched = run(FRAMEWORK + ["as-lightning", str(path)], tmp_path, extra_path=[installed])
    assert switched.stdout.split() == [LIGHTNING_VERSION, "True"], switched.stderr
    missing = run([sys.executable, "-c", "import pytorch_lightning"], tmp_path)
    assert "No module named 'pytorch_lightning'" in missing.stderr


def test_the_switch_in_a_notebook_cell_and_its_refusal_once_lightning_is_imported(tmp_path):
    installed = tmp_path / "site"
    (installed / "lightning").mkdir(parents=True)
    (installed / "lightning" / "__init__.py").write_text("")
    path = script(tmp_path, """
        import sys
        import framework.as_lightning
        framework.as_lightning.enable()
        import lightning as L
        print(L.LightningModule.__module__)
        import subprocess
        child = "import pytorch_lightning as pl; print(pl.Trainer.__module__)"
        print(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True).stdout.strip())
    """)
    done = run([sys.executable, str(path)], tmp_path, extra_path=[installed])
    assert done.stdout.split() == ["framework.module", "framework.trainer.trainer"], done.stderr
    assert done.stderr.count(ANNOUNCED) == 1  # said by the notebook's process, not again by the child
    late = script(tmp_path, """
        import lightning
        import framework.as_lightning
        framework.as_lightning.enable()
    """)
    refused = run([sys.executable, str(late)], tmp_path, extra_path=[installed])
    assert "enable(): lightning was imported before the switch" in refused.stderr


def test_a_library_built_on_lightning_runs_unchanged_on_one_process(tmp_path):
    path = script(tmp_path, f"""
        import json
        from tsforecast import fit_forecaster
        print(json.dumps(fit_forecaster({str(tmp_path / 'run')!r}, hidden=12)))
    """)
    done = run(FRAMEWORK + ["as-lightning", str(path)], tmp_path, extra_path=[LIBRARY])
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["world_size"] == 1 and result["global_step"] == 24 and result["val_loss"] < 0.5
    assert result["init_args"] == {"length": 8, "hidden": 12, "learning_rate": 0.05}
    assert result["sidecar_saves"] >= 4 and os.path.exists(result["best"] + ".json")
    assert sorted(os.listdir(tmp_path / "run" / "checkpoints")) == sorted(
        [os.path.basename(result["best"]), os.path.basename(result["best"]) + ".json", "last.ckpt", "last.ckpt.json"])


def test_a_library_built_on_lightning_runs_unchanged_on_two_ranks(tmp_path):
    path = script(tmp_path, f"""
        import json
        from tsforecast import fit_forecaster
        print(json.dumps(fit_forecaster({str(tmp_path / 'run')!r}, devices=2)))
    """)
    done = run(FRAMEWORK + ["as-lightning", str(path)], tmp_path, extra_path=[LIBRARY])
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["world_size"] == 2 and result["global_step"] == 12  # 64 samples / 8 per batch / 2 ranks, 3 epochs
    assert (tmp_path / "run" / "report.txt").read_text().count("best=") == 1  # rank_zero_only: one rank wrote
    assert done.stderr.count(ANNOUNCED) == 1


@pytest.mark.parametrize("start_method", ["spawn", "popen"])
def test_spawned_ranks_and_ranks_that_run_the_script_again_get_the_switch(tmp_path, start_method):
    """A script's own LightningModule, pickled by name: a spawned rank unpickles it by importing the script, which
    imports Lightning's names; with "popen" each rank runs the script itself."""
    path = script(tmp_path, f"""
        import torch
        import pytorch_lightning as pl
        from pytorch_lightning.strategies import DDPStrategy
        from torch.utils.data import DataLoader

        class Model(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(2, 1)

            def training_step(self, batch, batch_idx):
                return self.layer(batch).sum()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        if __name__ == "__main__":
            trainer = pl.Trainer(accelerator="cpu", devices=2, strategy=DDPStrategy(start_method={start_method!r}),
                                 max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                 enable_model_summary=False)
            trainer.fit(Model(), DataLoader(torch.ones(8, 2), batch_size=2))
            print(f"ranks {{trainer.world_size}} steps {{trainer.global_step}}")  # one write: both ranks print
    """)
    done = run(FRAMEWORK + ["as-lightning", str(path)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ranks 2 steps 2" in done.stdout and done.stderr.count(ANNOUNCED) == 1


def test_torchrun_started_ranks_get_the_switch(tmp_path):
    path = script(tmp_path, f"""
        import os, pathlib
        from tsforecast import fit_forecaster
        result = fit_forecaster({str(tmp_path / 'run')!r}, devices=2, max_epochs=1)
        rank = os.environ["RANK"]
        # a file per rank: two ranks printing to the one pipe can interleave their lines
        pathlib.Path(f"rank{{rank}}.txt").write_text(f"{{result['world_size']}} {{result['global_step']}}")
    """)
    done = run(FRAMEWORK + ["as-lightning"] + FRAMEWORK + ["launch", "--nproc-per-node", "2", str(path)], tmp_path,
               extra_path=[LIBRARY])
    assert done.returncode == 0, done.stderr
    assert [(tmp_path / f"rank{rank}.txt").read_text() for rank in (0, 1)] == ["2 4", "2 4"]


def test_the_librarys_own_tests_pass_under_pytest_with_the_switch(tmp_path):
    done = run(FRAMEWORK + ["as-lightning", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            str(LIBRARY / "tsforecast" / "tests"), "--rootdir", str(LIBRARY)], tmp_path,
               extra_path=[LIBRARY])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_the_command_says_how_to_use_it():
    assert "framework as-lightning COMMAND" in run(FRAMEWORK + ["as-lightning", "--help"], REPOSITORY).stdout
    missing = run(FRAMEWORK + ["as-lightning", "no-such-command-here"], REPOSITORY)
    assert missing.returncode == 2 and "no command 'no-such-command-here' on PATH" in missing.stderr
    assert Path(SITE, "lightning", "__init__.py").is_file()
