"""``framework fit|validate|test|predict --config``: configs and flags, typing, errors, the saved config."""

from __future__ import annotations

import os
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

    config = printed_config(capsys, "--config", base, "--model.hidden=5", "--model=tests.cli.cli_classes.WideNet",
                            "--model.width=3")
    # another class: the arguments given for the first that it takes too (lr) still apply, as in LightningCLI;
    # the others (hidden) are dropped
    assert config["model"] == {"class_path": "tests.cli.cli_classes.WideNet", "init_args": {"width": 3, "lr": 0.1}}


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
                                            "got 'three'"]),
    (BASE.replace("lr: 0.1", "lr: fast"), [], ["model.init_args.lr (", "c.yaml:8)", "expected float",
                                               "got 'fast' (str)"]),
    (BASE, ["--model.sizes=[1, x]"], ["model.init_args.sizes", "expected list[int]"]),
    (BASE, ["--model.mode=median"], ["model.init_args.mode", "expected one of 'sum', 'mean'"]),
    (BASE.replace(NET, "tests.cli.no_such_module.Net"), [], ["c.yaml:6", "cannot import 'tests.cli.no_such_module'",
                                                             "PYTHONPATH"]),
    (BASE.replace(NET, "tests.cli.cli_classes.Nett"), [], ["has no 'Nett'", "Did you mean tests.cli.cli_classes.Net"]),
    (BASE.replace(NET, "tests.cli.cli_classes.NotAModule"), [], ["NotAModule is not a framework.Module",
                                                                 "subclass of framework.Module"]),
    (BASE, ["--data=tests.cli.cli_classes.Net"], ["data (--data)", "Net is not a framework.DataModule"]),
    (BASE.replace("cpu\n", "cpu\n  callbacks:\n  - class_path: CSVLogger\n"), [],
     ["trainer.callbacks[0]", "CSVLogger is not a framework.Callback"]),
    ("model: {}\n", [], ["c.yaml:1)", "it is empty"]),
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
    with pytest.raises(ConfigError, match="Data is not a tests.cli.cli_classes.Net"):
        run(Net, Data, args=["fit", "--config", config, "--model=tests.cli.cli_classes.Data"])
    with pytest.raises(ConfigError, match="Net is not a framework.DataModule"):
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


OPTIONS = BASE.replace(NET, "tests.cli.cli_classes.Options").replace("lr: 0.1", "{}")


def test_less_common_argument_kinds_are_given_by_name_and_arrive_typed(tmp_path, capsys):
    from tests.cli.cli_classes import Color, Schedule

    defaults = printed_config(capsys, "--config", write(tmp_path, "c.yaml", OPTIONS))["model"]["init_args"]
    assert defaults["color"] == "RED" and defaults["activation"] == "torch.nn.functional.relu"
    assert defaults["tags"] == [] and defaults["schedule"] is None

    args = ["--config", write(tmp_path, "c.yaml", OPTIONS), "--model.color=BLUE",
            "--model.activation=torch.tanh", "--model.schedule={warmup: 3}", "--model.paths=[a, b/c]",
            "--model.pairs=[[1, 2], [3, 4]]", "--model.tags=[x, y]", "--model.bits=16", "--model.note=héllo ✓"]
    printed = printed_config(capsys, *args)["model"]["init_args"]
    assert printed["color"] == "BLUE" and printed["activation"] == "torch.tanh" and printed["bits"] == "16"
    assert printed["schedule"] == {"warmup": 3, "peak": 1.0}  # a dataclass is its fields
    assert run(args=["fit", *args, "--print_config"]) is None
    assert "note: héllo ✓" in capsys.readouterr().out  # printed as written, not escaped

    options = run(args=["fit", *args, *QUIET, "--trainer.max_steps=1", "--trainer.logger=false"]).model.options
    assert options["color"] is Color.BLUE and options["activation"] is torch.tanh
    assert options["schedule"] == Schedule(warmup=3) and options["paths"] == [Path("a"), Path("b/c")]
    assert options["pairs"] == [(1, 2), (3, 4)] and options["tags"] == {"x", "y"} and options["bits"] == "16"
    with pytest.raises(ConfigError, match=r"expected Color \(one of RED, BLUE\), got 'GREEN'"):
        printed_config(capsys, "--config", write(tmp_path, "c.yaml", OPTIONS), "--model.color=GREEN")
    with pytest.raises(ConfigError, match="expected a callable's import path"):
        printed_config(capsys, "--config", write(tmp_path, "c.yaml", OPTIONS), "--model.activation=torch.nope")


def test_exponent_floats_in_yaml_are_numbers_even_where_nothing_is_typed(tmp_path):
    text = BASE.replace(NET, "tests.cli.cli_classes.Kwargs").replace("lr: 0.1", "lr: 1e-3\n    factor: 5E+2")
    made = run(args=["fit", "--config", write(tmp_path, "c.yaml", text), *QUIET, "--trainer.max_steps=1"])
    assert made.model.hparams.lr == 0.001 and made.model.extra == {"lr": 0.001, "factor": 500.0}
    assert type(made.model.extra["factor"]) is float


def test_a_flag_can_replace_a_class_section_or_name_another_class_keeping_what_applies(tmp_path, capsys):
    logged = BASE.replace("cpu\n", "cpu\n  logger:\n    class_path: CSVLogger\n    init_args:\n      save_dir: logs\n"
                          "      name: first\n  callbacks:\n    class_path: ModelCheckpoint\n    init_args:\n"
                          "      monitor: val_loss\n      save_top_k: 3\n  strategy:\n    class_path: DDPStrategy\n")
    config = ["--config", write(tmp_path, "c.yaml", logged)]
    assert printed_config(capsys, *config, "--trainer.logger=false")["trainer"]["logger"] is False
    assert printed_config(capsys, *config, "--trainer.strategy=ddp")["trainer"]["strategy"] == "ddp"
    assert printed_config(capsys, *config, "--data=null")["data"] is None
    replaced = printed_config(capsys, *config, "--trainer.logger={class_path: CSVLogger, init_args: {save_dir: x}}")
    assert replaced["trainer"]["logger"]["init_args"]["save_dir"] == "x"
    assert replaced["trainer"]["logger"]["init_args"]["name"] == "first"  # a class section merges, as from a file
    # another class for the same section keeps the arguments it also takes
    switched = printed_config(capsys, *config, "--trainer.logger=TensorBoardLogger")["trainer"]["logger"]
    assert switched["class_path"] == "framework.loggers.TensorBoardLogger"
    assert switched["init_args"]["save_dir"] == "logs" and switched["init_args"]["name"] == "first"
    same = printed_config(capsys, *config, "--trainer.callbacks=framework.callbacks.ModelCheckpoint")
    assert same["trainer"]["callbacks"]["init_args"]["save_top_k"] == 3


def test_a_mapping_argument_is_replaced_by_a_later_config_not_merged(tmp_path, capsys):
    first = write(tmp_path, "a.yaml", BASE.replace("cpu\n", "cpu\n  max_time: {minutes: 5}\n"))
    second = write(tmp_path, "b.yaml", "trainer:\n  max_time: {hours: 1}\n")
    assert printed_config(capsys, "--config", first, "--config", second)["trainer"]["max_time"] == {"hours": 1}


def test_a_section_may_name_its_class_alone_or_hold_its_arguments_beside_class_path(tmp_path, capsys):
    text = BASE.replace(f"  class_path: {NET}\n  init_args:\n    lr: 0.1\n", "").replace("model:\n", f"model: {NET}\n")
    assert printed_config(capsys, "--config", write(tmp_path, "c.yaml", text))["model"]["class_path"] == NET
    printed = printed_config(capsys, "--config", write(tmp_path, "c.yaml", text), "--model={lr: 3}",
                             "--trainer.logger=CSVLogger", "--trainer.logger={save_dir: x}")
    assert printed["model"]["init_args"]["lr"] == 3.0 and printed["trainer"]["logger"]["init_args"]["save_dir"] == "x"

    flat = BASE.replace("    lr: 0.1\n", "").replace("  init_args:\n", "  lr: 0.4\n").replace(
        "cpu\n", "cpu\n  callbacks:\n  - class_path: ModelCheckpoint\n    monitor: val_loss\n")
    printed = printed_config(capsys, "--config", write(tmp_path, "flat.yaml", flat))
    assert printed["model"]["init_args"]["lr"] == 0.4
    assert printed["trainer"]["callbacks"][0]["init_args"]["monitor"] == "val_loss"


MORE_BAD_INPUTS = [
    (BASE, ["--traner.max_epochs=3"], ["traner (--traner.max_epochs)", "Did you mean trainer"]),
    (BASE.replace("lr: 0.1", "lr: !!python/object:os.system x"), [], ["c.yaml:8", "no YAML tags"]),
    (BASE.replace("lr: 0.1", "1: 2"), [], ["c.yaml:8", "a key is a name, got '1'"]),
    (BASE, ["--trainer.callbacks=ModelCheckpont"], ["got 'ModelCheckpont'", "Did you mean ModelCheckpoint"]),
    (BASE, ["--trainer.callbacks=lightning.pytorch.callbacks.ModelCheckpoint"],
     ["is Lightning's; framework's is framework.callbacks.ModelCheckpoint"]),
    (BASE, ["--trainer.callbacks=[EarlyStopping]"], ["trainer.callbacks[0].init_args.monitor is required",
                                                     "Give it in a config file."]),
    (BASE, ["--ckpt_path=missing.ckpt"], ["ckpt_path (--ckpt_path): no checkpoint at 'missing.ckpt'"]),
    (BASE, ["--print_config=comments"], ["--print_config takes no value"]),
    (BASE.replace("cpu\n", "cpu\n  logger: false\n"), ["--trainer.logger.save_dir=x"],
     ["trainer.logger (--trainer.logger.save_dir)"]),
    (BASE, ["--trainer.callbacks.0.init_args.monitor=x"], ["not an item of a list"]),
    (BASE.replace("cpu\n", "cpu\n  callbacks:\n  - class_path: ModelCheckpont\n"), [],
     ["c.yaml:6", "Did you mean ModelCheckpoint"]),
]


@pytest.mark.parametrize(("text", "flags", "fragments"), MORE_BAD_INPUTS)
def test_more_bad_input_gets_an_error_that_says_where_and_what(tmp_path, text, flags, fragments):
    test_bad_input_gets_an_error_that_says_where_and_what(tmp_path, text, flags, fragments)


def test_a_file_that_is_not_utf8_text_is_refused_by_name(tmp_path):
    path = tmp_path / "latin.yaml"
    path.write_bytes("model: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="latin.yaml: cannot be read as UTF-8 text"):
        run(args=["fit", "--config", str(path)])


def test_the_trainers_own_refusals_end_the_command_with_its_message_not_a_traceback(tmp_path, capsys):
    config = write(tmp_path, "c.yaml", BASE)
    assert main(["fit", "--config", config, "--trainer.accelerator=tpu"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("framework fit: error: ") and "accelerator" in error and "Traceback" not in error


def test_a_script_calling_run_reports_bad_input_and_exits_2(tmp_path):
    script = write(tmp_path, "train.py", "from framework.cli import run\nfrom tests.cli.cli_classes import Net, Data\n"
                                         "run(Net, Data)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bad = subprocess.run([sys.executable, script, "fit", "--model.lrr=1"], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
    assert "train.py: error: model.lrr (--model.lrr): Net takes no argument 'lrr'. Did you mean lr?" in bad.stderr
    helped = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, cwd=tmp_path,
                            env=env, timeout=120)
    assert helped.returncode == 0 and "usage: framework fit|validate|test|predict" in helped.stdout, helped.stderr


def test_a_dotted_string_stays_a_string_where_no_class_is_taken(tmp_path, capsys):
    text = BASE.replace("cpu\n", "cpu\n  default_root_dir: runs\n").replace("lr: 0.1", "name: first")
    config = ["--config", write(tmp_path, "c.yaml", text)]
    printed = printed_config(capsys, *config, "--trainer.default_root_dir=runs.v2", "--model.name=resnet.small")
    assert printed["trainer"]["default_root_dir"] == "runs.v2"
    assert printed["model"]["init_args"]["name"] == "resnet.small"


def test_keys_under_a_class_named_alone_go_to_its_init_args_at_any_depth(tmp_path, capsys):
    config = ["--config", write(tmp_path, "c.yaml", OPTIONS)]
    printed = printed_config(capsys, *config, "--model.helper=EarlyStopping", "--model.helper.monitor=val_loss",
                             "--model.schedule={warmup: 3}", "--model.schedule.peak=2")["model"]["init_args"]
    assert printed["helper"]["class_path"] == "framework.callbacks.EarlyStopping"
    assert printed["helper"]["init_args"]["monitor"] == "val_loss"
    assert printed["schedule"] == {"warmup": 3, "peak": 2.0}


def test_a_class_named_alone_in_a_later_file_keeps_the_arguments_it_takes(tmp_path, capsys):
    base = write(tmp_path, "a.yaml", BASE.replace("cpu\n", "cpu\n  logger:\n    class_path: CSVLogger\n"
                                                  "    init_args: {save_dir: logs, name: first}\n"))
    wide = write(tmp_path, "b.yaml", "model: tests.cli.cli_classes.WideNet\ntrainer:\n  logger: TensorBoardLogger\n")
    printed = printed_config(capsys, "--config", base, "--config", wide)
    assert printed["model"] == {"class_path": "tests.cli.cli_classes.WideNet", "init_args": {"width": 8, "lr": 0.1}}
    assert printed["trainer"]["logger"]["class_path"] == "framework.loggers.TensorBoardLogger"
    assert printed["trainer"]["logger"]["init_args"]["save_dir"] == "logs"

    named = write(tmp_path, "c.yaml", f"model: {NET}\n")
    more = write(tmp_path, "d.yaml", "model:\n  init_args: {lr: 0.2}\n")
    assert printed_config(capsys, "--config", named, "--config", more)["model"]["init_args"]["lr"] == 0.2


def test_arguments_carried_across_two_class_changes_are_those_each_class_took(tmp_path, capsys):
    printed = printed_config(capsys, "--config", write(tmp_path, "c.yaml", BASE), "--model.hidden=7",
                             "--model=tests.cli.cli_classes.WideNet", f"--model={NET}")["model"]["init_args"]
    assert printed["hidden"] == 4 and printed["lr"] == 0.1  # WideNet took lr, not hidden


def test_a_union_reads_the_same_from_a_file_and_a_flag_and_builds_what_it_checked(tmp_path, capsys):
    from_flags = ["--config", write(tmp_path, "c.yaml", OPTIONS), "--model.shade=BLUE", "--model.scale=3",
                  "--trainer.strategy=SingleDeviceStrategy"]
    text = OPTIONS.replace("{}", "{shade: BLUE, scale: 3}").replace("cpu\n", "cpu\n  strategy: SingleDeviceStrategy\n")
    from_file = ["--config", write(tmp_path, "d.yaml", text)]
    printed = printed_config(capsys, *from_flags)
    assert printed == printed_config(capsys, *from_file)
    assert printed["model"]["init_args"]["shade"] == "BLUE" and type(printed["model"]["init_args"]["scale"]) is int
    made = run(args=["fit", *from_file, *QUIET, "--trainer.max_steps=1", "--trainer.logger=false"])
    assert made.model.options["shade"] == "BLUE" and made.model.options["scale"] == 3  # str stays str
    assert type(made.trainer.strategy).__name__ == "SingleDeviceStrategy"


def test_a_whole_section_can_be_given_or_dropped_by_one_flag(tmp_path, capsys):
    config = ["--config", write(tmp_path, "c.yaml", BASE)]
    printed = printed_config(capsys, *config, f"--model={{class_path: {NET}, init_args: {{lr: 0.3}}}}",
                             "--trainer={max_epochs: 4}", "--data.init_args=null")
    assert printed["model"]["init_args"]["lr"] == 0.3 and printed["trainer"]["max_epochs"] == 4
    assert printed["trainer"]["accelerator"] == "cpu"  # merged into the trainer section, as from a file
    assert printed["data"]["init_args"] == {"batch_size": 8, "n": 32}
    assert printed_config(capsys, *config, "--trainer=null")["trainer"]["max_epochs"] is None


def test_help_wins_over_anything_else_on_the_line(capsys):
    assert main(["fit", "--help", "--bogus"]) == 0
    assert "usage: framework fit" in capsys.readouterr().out


def test_only_usable_classes_are_known_by_bare_name():
    from framework.cli.class_names import short_names

    assert {"ModelCheckpoint", "CSVLogger", "DDPStrategy"} <= set(short_names())
    assert not {"Callback", "Logger", "Strategy", "EarlyStoppingReason", "Ranks"} & set(short_names())


def test_text_that_reads_as_a_number_round_trips_as_text(tmp_path, capsys):
    printed = printed_config(capsys, "--config", write(tmp_path, "c.yaml", BASE), "--model.name=1e5",
                             "--trainer.gradient_clip_algorithm=007")
    assert printed["model"]["init_args"]["name"] == "1e5" and printed["trainer"]["gradient_clip_algorithm"] == "007"
    assert run(args=["fit", "--config", write(tmp_path, "c.yaml", BASE), "--model.name=1e5", "--print_config"]) is None
    again = write(tmp_path, "printed.yaml", capsys.readouterr().out)
    assert printed_config(capsys, "--config", again)["model"]["init_args"]["name"] == "1e5"


def test_a_none_default_takes_none_whatever_the_annotation(tmp_path, capsys):
    config = ["--config", write(tmp_path, "c.yaml", OPTIONS)]
    printed = printed_config(capsys, *config, "--model.label=null")["model"]["init_args"]
    assert printed["label"] is None and printed["limits"] is None
    again = write(tmp_path, "printed.yaml", yaml.safe_dump({"model": {"class_path": "tests.cli.cli_classes.Options",
                                                                      "init_args": printed}}))
    assert printed_config(capsys, "--config", again)["model"]["init_args"] == printed


def test_a_dataclass_default_prints_as_its_fields(tmp_path, capsys):
    printed = printed_config(capsys, "--config", write(tmp_path, "c.yaml", OPTIONS))["model"]["init_args"]
    assert printed["stages"] == {"warmup": 1, "peak": 0.5}


def test_an_error_names_the_file_that_named_the_class(tmp_path):
    typo = write(tmp_path, "typo.yaml", "model: tests.cli.cli_classes.Nett\n")
    more = write(tmp_path, "more.yaml", "model:\n  init_args: {hidden: 3}\n")
    with pytest.raises(ConfigError, match="model.class_path .*typo.yaml:1.*has no 'Nett'"):
        run(args=["fit", "--config", typo, "--config", more, "--print_config"])


@pytest.mark.parametrize(("text", "message"), [
    ("trainer:\n  plugins: &a [*a]\n", "refers to the value holding it"),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
     "expand to more than 100,000 values"),
])
def test_yaml_aliases_that_never_end_are_refused(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        run(args=["fit", "--config", write(tmp_path, "c.yaml", text), "--print_config"])


@pytest.mark.parametrize(("given", "expected"), [("link", "link"), ("true", True), ("True", True), ("yes", True),
                                                 ("no", False), ("false", False), ("False", False)])
def test_an_argument_annotated_bool_or_a_literal_takes_either(tmp_path, capsys, given, expected):
    config = write(tmp_path, "c.yaml", BASE)
    printed = printed_config(capsys, "--config", config, "--trainer.callbacks=framework.callbacks.ModelCheckpoint",
                             f"--trainer.callbacks.save_last={given}")
    assert printed["trainer"]["callbacks"]["init_args"]["save_last"] == expected
    yaml_given = BASE.replace("  accelerator: cpu\n", "  accelerator: cpu\n  callbacks:\n    - class_path: "
                              f"framework.callbacks.ModelCheckpoint\n      init_args:\n        save_last: {given}\n")
    printed = printed_config(capsys, "--config", write(tmp_path, "d.yaml", yaml_given))
    assert printed["trainer"]["callbacks"][0]["init_args"]["save_last"] == expected


def test_a_value_neither_bool_nor_the_literal_is_refused_naming_what_is_accepted(tmp_path, capsys):
    flags = ["--config", write(tmp_path, "c.yaml", BASE), "--trainer.callbacks=ModelCheckpoint"]
    with pytest.raises(ConfigError, match=r"trainer.callbacks.init_args.save_last .*expected bool \| one of 'link' "
                                          r"\| None, got 'lnk'"):
        printed_config(capsys, *flags, "--trainer.callbacks.save_last=lnk")


def test_trainer_defaults_from_the_environment_sit_under_the_config_and_flags(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PL_TRAINER_MAX_EPOCHS", "5")
    monkeypatch.setenv("FRAMEWORK_TRAINER_LIMIT_TRAIN_BATCHES", "3")
    monkeypatch.setenv("PL_TRAINER_LOGGER", "False")
    config = write(tmp_path, "c.yaml", BASE)  # sets max_epochs: 2
    printed = printed_config(capsys, "--config", config, "--trainer.logger=true")
    assert printed["trainer"]["max_epochs"] == 2 and printed["trainer"]["logger"] is True
    assert printed["trainer"]["limit_train_batches"] == 3  # in the printed config: it repeats the run alone

    monkeypatch.setenv("PL_TRAINER_MAX_STEPS", "'seven'")
    with pytest.raises(ConfigError, match=r"trainer.max_steps \(environment variable PL_TRAINER_MAX_STEPS\)"):
        run(args=["fit", "--config", config, "--print_config"])
