"""``framework fit|validate|test|predict --config``: configs and flags, typing, errors, the saved config."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import framework
from framework.cli import ConfigError, run
from framework.cli.main import main
from tests.cli.cli_classes import Data, Net, WideNet

ROOT = Path(__file__).resolve().parents[2]
NET = "tests.cli.cli_classes.Net"
DATA = "tests.cli.cli_classes.Data"
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]

BASE = f"""\
seed_everything: 3
trainer:
  max_epochs: 2
  accelerator: cpu
model:
  class_path: {NET}
  init_args:
    lr: 0.1
data:
  class_path: {DATA}
"""


def write(directory: Path, name: str, text: str) -> str:
    path = directory / name
    path.write_text(text)
    return str(path)


def printed_config(capsys, *args: str) -> dict:
    assert run(args=["fit", *args, "--print_config"]) is None
    return yaml.safe_load(capsys.readouterr().out)


def test_every_subcommand_runs_on_a_small_config(tmp_path):
    config = write(tmp_path, "run.yaml", BASE)
    fitted = run(args=["fit", "--config", config, *QUIET])
    assert fitted.trainer.current_epoch == 2 and fitted.trainer.global_step == 8
    assert isinstance(fitted.model, Net) and fitted.model.hparams.lr == 0.1 and isinstance(fitted.datamodule, Data)
    checkpoint = fitted.trainer.checkpoint_callback.best_model_path
    assert Path(checkpoint).is_file()

    validated = run(args=["validate", "--config", config, *QUIET, "--ckpt_path", checkpoint, "--verbose=false"])
    tested = run(args=["test", "--config", config, *QUIET, f"--ckpt_path={checkpoint}"])
    predicted = run(args=["predict", "--config", config, *QUIET, "--ckpt_path", checkpoint])

    # evaluated from the checkpoint, each equals the trained model's own loss on the same data
    x, y = Data().val_dataloader().dataset.tensors
    with torch.no_grad():
        expected = torch.nn.functional.mse_loss(fitted.model(x), y).item()
    assert validated.result[0]["val_loss"] == pytest.approx(expected, rel=1e-5)
    assert tested.result[0]["test_loss"] == pytest.approx(expected, rel=1e-5)
    assert torch.allclose(torch.cat(predicted.result), fitted.model(x).detach(), atol=1e-6)


def test_fit_from_the_command_line_equals_the_same_fit_written_in_python(tmp_path):
    config = write(tmp_path, "run.yaml", BASE)
    from_cli = run(args=["fit", "--config", config, *QUIET, "--trainer.logger=false"]).model

    framework.seed_everything(3)
    trainer = framework.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_progress_bar=False,
                                enable_model_summary=False, default_root_dir=tmp_path / "python")
    model = Net(lr=0.1)
    trainer.fit(model, datamodule=Data())
    for ours, reference in zip(from_cli.state_dict().values(), model.state_dict().values()):
        assert torch.equal(ours, reference)


def test_later_sources_override_earlier_ones_key_by_key(tmp_path, capsys):
    base = write(tmp_path, "base.yaml", BASE)
    more = write(tmp_path, "more.yaml", "trainer:\n  max_epochs: 5\nmodel:\n  init_args:\n    hidden: 7\n")
    config = printed_config(capsys, "--config", base, "--trainer.max_epochs=9", "--model.lr=0.5", "--config", more)
    assert config["trainer"]["max_epochs"] == 5  # the second file comes after the flag
    assert config["trainer"]["accelerator"] == "cpu"  # kept from the first file
    assert config["model"]["init_args"]["lr"] == 0.5 and config["model"]["init_args"]["hidden"] == 7
    assert config["seed_everything"] == 3

    config = printed_config(capsys, "--config", base, "--model=tests.cli.cli_classes.WideNet", "--model.width=3")
    # another class: the first one's arguments (lr: 0.1) go with it; the new class's defaults are filled in
    assert config["model"] == {"class_path": "tests.cli.cli_classes.WideNet", "init_args": {"width": 3, "lr": 0.05}}


@pytest.mark.parametrize(("flag", "key", "expected"), [
    ("--trainer.max_epochs=3", ("trainer", "max_epochs"), 3),
    ("--trainer.max_epochs=null", ("trainer", "max_epochs"), None),
    ("--trainer.limit_train_batches=0.5", ("trainer", "limit_train_batches"), 0.5),
    ("--trainer.limit_train_batches=2", ("trainer", "limit_train_batches"), 2),
    ("--trainer.enable_checkpointing=false", ("trainer", "enable_checkpointing"), False),
    ("--trainer.precision=bf16-mixed", ("trainer", "precision"), "bf16-mixed"),
    ("--trainer.precision=16", ("trainer", "precision"), 16),
    ("--trainer.devices=2", ("trainer", "devices"), 2),
    ("--trainer.max_time=00:00:01:00", ("trainer", "max_time"), "00:00:01:00"),
    ("--trainer.default_root_dir=runs/7", ("trainer", "default_root_dir"), "runs/7"),
    ("--model.lr=1e-3", ("model", "init_args", "lr"), 0.001),
    ("--model.lr=1", ("model", "init_args", "lr"), 1.0),
    ("--model.init_args.hidden=16", ("model", "init_args", "hidden"), 16),
    ("--model.name=007", ("model", "init_args", "name"), "007"),
    ("--model.name=true", ("model", "init_args", "name"), "true"),
    ("--model.dropout=null", ("model", "init_args", "dropout"), None),
    ("--model.dropout=0.25", ("model", "init_args", "dropout"), 0.25),
    ("--model.sizes=[3, 4, 5]", ("model", "init_args", "sizes"), [3, 4, 5]),
    ("--model.sizes=[]", ("model", "init_args", "sizes"), []),
    ("--model.mode=sum", ("model", "init_args", "mode"), "sum"),
    ("--model.shape=[4, 5]", ("model", "init_args", "shape"), [4, 5]),
    ("--model.frozen=true", ("model", "init_args", "frozen"), True),
    ("--data.batch_size=4", ("data", "init_args", "batch_size"), 4),
    ("--ckpt_path=last", ("ckpt_path",), "last"),
    ("--seed_everything=false", ("seed_everything",), False),
    ("--seed_everything=42", ("seed_everything",), 42),
])
def test_a_flag_is_typed_by_the_signature_it_is_for(tmp_path, capsys, flag, key, expected):
    config = printed_config(capsys, "--config", write(tmp_path, "c.yaml", BASE), flag)
    value = config
    for part in key:
        value = value[part]
    assert value == expected and type(value) is type(expected)


def test_typed_values_reach_the_objects(tmp_path):
    made = run(args=["fit", "--config", write(tmp_path, "c.yaml", BASE), *QUIET, "--trainer.max_steps=1",
                     "--model.shape=[4, 5]", "--model.name=007", "--trainer.logger=CSVLogger",
                     f"--trainer.logger.save_dir={tmp_path / 'logs'}",
                     "--trainer.callbacks=[{class_path: EarlyStopping, init_args: {monitor: train_loss}}]"])
    assert made.model.hparams.shape == (4, 5) and made.model.hparams.name == "007"
    assert isinstance(made.trainer.logger, framework.loggers.CSVLogger)
    assert made.trainer.logger.save_dir == str(tmp_path / "logs")
    assert [type(callback).__name__ for callback in made.trainer.callbacks].count("EarlyStopping") == 1


BAD_INPUTS = [
    # (file contents or None, flags, what the message must say)
    (BASE, ["--trainer.max_epoch=3"], ["trainer.max_epoch (--trainer.max_epoch)", "Did you mean max_epochs"]),
    (BASE, ["--model.hiden=3"], ["model.init_args.hiden", "Net takes no argument 'hiden'", "Did you mean hidden"]),
    (BASE + "optimizer: Adam\n", [], ["c.yaml:11", "no optimizer section", "configure_optimizers"]),
    (BASE + "trainr:\n  max_epochs: 1\n", [], ["trainr (", "c.yaml:11", "Did you mean trainer"]),
    (BASE, ["--trainer.max_epochs=three"], ["trainer.max_epochs (--trainer.max_epochs)", "expected int | None",
                                            "got three"]),
    (BASE.replace("lr: 0.1", "lr: fast"), [], ["model.init_args.lr (", "c.yaml:8)", "expected float",
                                               "got 'fast' (str)"]),
    (BASE, ["--model.sizes=[1, x]"], ["model.init_args.sizes", "expected list[int]"]),
    (BASE, ["--model.mode=median"], ["model.init_args.mode", "expected one of 'sum', 'mean'"]),
    (BASE.replace(NET, "tests.cli.no_such_module.Net"), [], ["c.yaml:6", "cannot import 'tests.cli.no_such_module'",
                                                             "PYTHONPATH"]),
    (BASE.replace(NET, "tests.cli.cli_classes.Nett"), [], ["has no 'Nett'", "Did you mean tests.cli.cli_classes.Net"]),
    (BASE.replace(NET, "tests.cli.cli_classes.NotAModule"), [], ["NotAModule is not a Module",
                                                                 "subclass of framework.Module"]),
    (BASE, ["--data=tests.cli.cli_classes.Net"], ["data (--data)", "Net is not a DataModule"]),
    (BASE.replace("cpu\n", "cpu\n  callbacks:\n  - class_path: CSVLogger\n"), [],
     ["trainer.callbacks[0]", "CSVLogger is not a Callback"]),
    (BASE.replace("cpu\n", "cpu\n  callbacks:\n  - class_path: ModelCheckpoint\n    monitor: val_loss\n"), [],
     ["trainer.callbacks[0].monitor", "put 'monitor' under init_args"]),
    ("trainer:\n  max_epochs: [1\n", [], ["c.yaml:3", "not valid YAML", "begun on line 2"]),
    ("trainer:\n  max_epochs: 1\n  max_epochs: 2\n", [], ["c.yaml:3", "'max_epochs' is given twice", "line 2"]),
    ("- trainer\n", [], ["c.yaml:1", "not a list"]),
    ("trainer:\n  max_epochs: 1\n", [], ["no model given", "--model=mypackage.models.Net"]),
    (BASE.replace(NET, "tests.cli.cli_classes.NeedsWidth").replace("lr: 0.1", "{}"), [],
     ["model.init_args.width is required", "NeedsWidth has no default"]),
    (BASE, ["--ckpt_path"], ["--ckpt_path needs a value"]),
    (BASE, ["extra.yaml"], ["unexpected argument 'extra.yaml'"]),
    (BASE, ["--trainer.callbacks[0].monitor=x"], ["--trainer.callbacks[0].monitor", "the whole list"]),
    (None, ["--config", "missing.yaml"], ["--config missing.yaml: no such file"]),
]


@pytest.mark.parametrize(("text", "flags", "fragments"), BAD_INPUTS)
def test_bad_input_gets_an_error_that_says_where_and_what(tmp_path, text, flags, fragments):
    config = ["--config", write(tmp_path, "c.yaml", text)] if text is not None else []
    with pytest.raises(ConfigError) as raised:
        run(args=["fit", *config, *flags, "--print_config"])
    for fragment in fragments:
        assert fragment in str(raised.value), str(raised.value)


def test_an_unknown_subcommand_names_the_nearest(capsys):
    with pytest.raises(ConfigError, match="unknown subcommand 'fitt'. Did you mean fit"):
        run(args=["fitt"])


def test_the_printed_config_fed_back_gives_the_same_config_and_the_same_run(tmp_path, capsys):
    first = write(tmp_path, "c.yaml", BASE)
    printed = printed_config(capsys, "--config", first, "--model.hidden=5", "--trainer.callbacks=[ModelCheckpoint]")
    again = write(tmp_path, "printed.yaml", yaml.safe_dump(printed))
    assert printed_config(capsys, "--config", again) == printed

    one = run(args=["fit", "--config", first, "--model.hidden=5", *QUIET, "--trainer.default_root_dir=one"])
    two = run(args=["fit", "--config", again, *QUIET, "--trainer.default_root_dir=two"])
    for ours, theirs in zip(one.model.state_dict().values(), two.model.state_dict().values()):
        assert torch.equal(ours, theirs)


def test_each_run_writes_its_resolved_config_to_its_log_dir_and_never_replaces_one(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)  # an earlier seed_everything in this process sets it
    config = write(tmp_path, "c.yaml", BASE.replace("seed_everything: 3\n", ""))
    made = run(args=["fit", "--config", config, *QUIET, "--model.hidden=6"])
    saved = Path(made.trainer.log_dir) / "config.yaml"
    text = saved.read_text()
    assert text.startswith(f"# framework=={framework.__version__}\n")
    written = yaml.safe_load(text)
    assert written["seed_everything"] == 0  # `true` (the default) is saved as the seed it chose
    assert written["model"]["init_args"]["hidden"] == 6
    assert written == {**printed_config(capsys, "--config", config, *QUIET, "--model.hidden=6"), "seed_everything": 0}

    # a second run logged to the same place (no logger, so the root directory) is refused before it trains
    no_logger = ["fit", "--config", config, *QUIET, "--trainer.logger=false", f"--trainer.default_root_dir={tmp_path}"]
    run(args=no_logger)
    before = (tmp_path / "config.yaml").read_text()
    with pytest.raises(ConfigError, match="config.yaml already exists"):
        run(args=[*no_logger, "--model.hidden=9"])
    assert (tmp_path / "config.yaml").read_text() == before
    run(args=[*no_logger, "--model.hidden=9"], overwrite_config=True)
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["model"]["init_args"]["hidden"] == 9


def test_run_with_fixed_classes_takes_their_arguments_directly(tmp_path, capsys):
    config = write(tmp_path, "c.yaml", "trainer:\n  max_epochs: 1\nmodel:\n  lr: 0.2\ndata:\n  batch_size: 16\n")
    assert run(Net, Data, args=["fit", "--config", config, "--model.hidden=3", "--print_config"]) is None
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["lr"] == 0.2 and printed["model"]["hidden"] == 3 and "class_path" not in printed["model"]
    assert printed["data"] == {"batch_size": 16, "n": 32}

    made = run(Net, Data, args=["fit", "--config", config, *QUIET])
    assert type(made.model) is Net and made.model.hparams.lr == 0.2 and made.datamodule.batch_size == 16
    # a subclass of the fixed class may still be named
    made = run(Net, Data, args=["fit", "--config", config, *QUIET, "--model=tests.cli.cli_classes.WideNet",
                                "--model.width=5"])
    assert type(made.model) is WideNet and made.model.hparams.hidden == 5
    with pytest.raises(ConfigError, match="Data is not a Net"):
        run(Net, Data, args=["fit", "--config", config, "--model=tests.cli.cli_classes.Data"])
    with pytest.raises(ConfigError, match="Net is not a DataModule"):
        run(Net, Net, args=["fit", "--config", config])


def test_the_trainer_starts_two_ranks_from_a_config_and_one_of_them_saves_it(tmp_path):
    made = run(args=["fit", "--config", write(tmp_path, "c.yaml", BASE), *QUIET, "--trainer.devices=2",
                     "--trainer.strategy=ddp", "--trainer.logger=CSVLogger", f"--trainer.logger.save_dir={tmp_path}"])
    assert made.trainer.global_step == 4  # 32 samples, batches of 8, over 2 ranks, 2 epochs
    assert [path.name for path in tmp_path.glob("lightning_logs/*/config.yaml")] == ["config.yaml"]


def test_the_console_script_and_python_m_framework_are_the_same_command(tmp_path):
    config = write(tmp_path, "c.yaml", BASE)
    outputs = []
    for command in ([str(Path(sys.executable).with_name("framework"))], [sys.executable, "-m", "framework"]):
        done = subprocess.run([*command, "fit", "--config", config, "--print_config"], capture_output=True,
                              text=True, cwd=ROOT, timeout=120)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
        bad = subprocess.run([*command, "fit", "--config", config, "--trainer.max_epoch=1"], capture_output=True,
                             text=True, cwd=ROOT, timeout=120)
        assert bad.returncode == 2
        assert bad.stderr.startswith("framework fit: error: trainer.max_epoch") and "Traceback" not in bad.stderr
    assert outputs[0] == outputs[1] and yaml.safe_load(outputs[0])["model"]["class_path"] == NET


def test_help_names_the_sources_and_sections(capsys):
    assert main(["fit", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--config FILE" in text and "--print_config" in text and "ckpt_path" in text
    assert main(["--help"]) == 0
    assert "fit " in capsys.readouterr().out
