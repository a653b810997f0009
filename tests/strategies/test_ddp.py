"""DDP on CPU with gloo and real processes: the Trainer starting its ranks, and ranks started by testing.spawn."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torchmetrics
from torch.utils.data import DataLoader, TensorDataset

import framework
from framework.runtime.worker_processes import RankExitedError
from framework.testing import spawn
from tests.strategies.ddp_models import FEATURES, Regressor, plain_pytorch_weights, quiet_trainer, regression_data

# -- the Trainer starts the ranks ------------------------------------------------------------------------

@pytest.mark.parametrize("accumulate", [1, 2])
def test_two_ranks_train_as_one_process_with_the_doubled_batch(accumulate):
    torch.manual_seed(0)
    model = Regressor()
    torch.manual_seed(0)
    reference = plain_pytorch_weights(Regressor(), regression_data(), batch_size=8, epochs=2, accumulate=accumulate)
    trainer = quiet_trainer(devices=2, strategy="ddp", max_epochs=2, accumulate_grad_batches=accumulate)
    trainer.fit(model, DataLoader(regression_data(), batch_size=4))
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, reference[name], rtol=1e-5, atol=1e-6, msg=name)
    assert trainer.global_step == 16 // accumulate  # 64 samples / 8 per step, twice
    assert trainer.current_epoch == 2
    assert trainer.state.finished and trainer.model is model


def test_shuffled_two_ranks_equal_one_trainer_with_the_doubled_batch():
    def train(devices: int, batch_size: int) -> dict[str, torch.Tensor]:
        framework.seed_everything(3, verbose=False)
        model = Regressor()
        quiet_trainer(devices=devices, max_epochs=3).fit(model, DataLoader(regression_data(), batch_size, shuffle=True))
        return model.state_dict()

    two_ranks, one = train(2, 4), train(1, 8)
    for name, value in two_ranks.items():
        torch.testing.assert_close(value, one[name], rtol=1e-5, atol=1e-6, msg=name)


def test_four_ranks_train_as_one_process_with_the_quadrupled_batch():
    torch.manual_seed(1)
    model = Regressor()
    torch.manual_seed(1)
    reference = plain_pytorch_weights(Regressor(), regression_data(), batch_size=16, epochs=1)
    quiet_trainer(devices=4, max_epochs=1).fit(model, DataLoader(regression_data(), batch_size=4))
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, reference[name], rtol=1e-5, atol=1e-6, msg=name)


class Classifier(framework.Module):
    """Logs validation accuracy three ways: a synced mean, a torchmetrics Metric, and its own count."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(FEATURES, 3)
        self.accuracy = torchmetrics.classification.MulticlassAccuracy(num_classes=3, average="micro")

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        predicted = self.net(x).argmax(dim=1)
        self.log("val_acc", (predicted == y).float().mean(), sync_dist=True)
        self.log("val_seen", float(len(y)), reduce_fx="sum", sync_dist=True)
        self.accuracy(predicted, y)
        self.log("val_metric_acc", self.accuracy)

    def predict_step(self, batch, batch_idx):
        return self.net(batch[0]).argmax(dim=1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


def classification_data(count: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(count, FEATURES, generator=generator)
    return TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long())


def test_validation_over_an_uneven_split_counts_every_sample_once():
    data = classification_data(37)  # 37 samples over 2 ranks: 19 and 18, batches of 5
    torch.manual_seed(0)
    model = Classifier()
    expected = quiet_trainer(devices=1).validate(model, DataLoader(data, batch_size=5), verbose=False)[0]
    results = quiet_trainer(devices=2).validate(model, DataLoader(data, batch_size=5), verbose=False)[0]
    assert results["val_seen"] == 37
    assert results["val_acc"] == pytest.approx(expected["val_acc"], abs=1e-6)
    assert results["val_metric_acc"] == pytest.approx(expected["val_metric_acc"], abs=1e-6)
    assert 0.0 < results["val_acc"] < 1.0  # a value that could have come out otherwise


def test_a_fraction_of_validation_batches_is_taken_of_each_ranks_part():
    # 5 samples in batches of 2: rank 0's part (3 samples) has 2 batches, half of them 1; rank 1's part (2 samples)
    # has 1, half of which would be none: the fraction is checked against the whole loader's 3 batches and every
    # rank with batches runs at least one, so nothing fails or is skipped
    data = DataLoader(classification_data(5), batch_size=2)
    results = quiet_trainer(devices=2, limit_val_batches=0.5).validate(Classifier(), data, verbose=False)
    assert results[0]["val_seen"] == 4
    with pytest.raises(framework.MisconfigurationError, match="0.2 of 3 batches rounds down to 0"):
        quiet_trainer(devices=2, limit_val_batches=0.2).validate(Classifier(), data, verbose=False)


def test_predictions_of_all_ranks_come_back_in_dataset_order():
    data = classification_data(23)
    model = Classifier()
    single = quiet_trainer(devices=1).predict(model, DataLoader(data, batch_size=4))
    predictions = quiet_trainer(devices=3).predict(model, DataLoader(data, batch_size=4))
    assert torch.equal(torch.cat(predictions), torch.cat(single))


def test_after_fit_the_caller_holds_metrics_state_checkpoint_and_log_version(tmp_path):
    data = classification_data(40)
    model = Classifier()
    trainer = framework.Trainer(accelerator="cpu", devices=2, max_epochs=2, default_root_dir=tmp_path,
                                enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(data, batch_size=5, shuffle=True), DataLoader(data, batch_size=8))
    assert set(trainer.callback_metrics) >= {"val_acc", "val_seen", "val_metric_acc"}
    assert float(trainer.callback_metrics["val_seen"]) == 40
    assert trainer.global_step == 8 and trainer.current_epoch == 2
    best = trainer.checkpoint_callback.best_model_path
    assert best.endswith("epoch=1-step=8.ckpt") and os.path.exists(best)
    assert trainer.logger.version == 0
    checkpoint = torch.load(best, weights_only=True)
    for name, value in model.state_dict().items():  # the caller's Module holds the weights trained
        assert torch.equal(value, checkpoint["state_dict"][name]), name
    assert len(checkpoint["loops"]["fit"]["rng_states"]) == 2  # each rank's random state
    # test(ckpt_path="best") finds the file rank 0 recorded, and logs into the same version
    results = trainer.validate(model, DataLoader(data, batch_size=8), ckpt_path="best", verbose=False)
    assert results[0]["val_seen"] == 40
    assert sorted(os.listdir(tmp_path / "lightning_logs")) == ["version_0"]


class BuildsItsLayersLate(Regressor):
    def __init__(self) -> None:
        super().__init__()
        del self.net
        self.net = None

    def configure_model(self):
        if self.net is None:
            self.net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def test_layers_built_in_configure_model_on_the_ranks_come_back_to_the_callers_module():
    def train(devices: int) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        model = BuildsItsLayersLate()
        quiet_trainer(devices=devices, max_epochs=1).fit(model, DataLoader(regression_data(32), 8 // devices))
        return model.state_dict()

    two_ranks, one = train(2), train(1)
    assert set(two_ranks) == set(one) == {"net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"}
    for name, value in two_ranks.items():
        torch.testing.assert_close(value, one[name], rtol=1e-5, atol=1e-6, msg=name)


class ChoosesItsCheckpointing(Classifier):
    test_step = Classifier.validation_step

    def configure_callbacks(self):
        return [framework.callbacks.ModelCheckpoint(dirpath=self.checkpoint_dir, monitor="val_acc", mode="max")]


@pytest.mark.parametrize("devices", [1, 2])
def test_a_checkpoint_callback_from_configure_callbacks_serves_test_with_the_best_checkpoint(tmp_path, devices):
    model = ChoosesItsCheckpointing()
    model.checkpoint_dir = str(tmp_path)
    trainer = quiet_trainer(devices=devices, max_epochs=2, enable_checkpointing=True)
    data = DataLoader(classification_data(20), batch_size=5)
    trainer.fit(model, data, data)
    best = trainer.checkpoint_callback.best_model_path
    assert os.path.dirname(best) == str(tmp_path)  # the Module's callback, not the Trainer's default one
    assert trainer.test(model, data, ckpt_path="best", verbose=False)[0]["val_seen"] == 20
    assert trainer.ckpt_path == best


def _log_dir_of_each_rank(rank: int, root: str) -> str:
    trainer = framework.Trainer(accelerator="cpu", devices=2, max_epochs=1, default_root_dir=root,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Regressor(), DataLoader(regression_data(16), batch_size=4))
    return trainer.log_dir


def test_every_rank_names_the_same_log_dir(tmp_path):
    os.makedirs(tmp_path / "lightning_logs" / "version_0")  # an earlier run's
    assert spawn(2, _log_dir_of_each_rank, str(tmp_path)) == [str(tmp_path / "lightning_logs" / "version_1")] * 2


class LogsPerRank(Regressor):
    def training_step(self, batch, batch_idx):
        rank = float(self.global_rank)
        self.log("rank_mean", rank, sync_dist=True, on_step=True, on_epoch=True)
        self.log("rank_sum", rank + 1, sync_dist=True, reduce_fx="sum", on_step=True, on_epoch=False)
        self.log("rank_max", rank, sync_dist=True, reduce_fx="max", on_epoch=True)
        self.log("rank_local", rank, on_step=True, on_epoch=False)
        return super().training_step(batch, batch_idx)


def test_sync_dist_reduces_step_and_epoch_values_across_ranks():
    trainer = quiet_trainer(devices=2, max_epochs=1)
    trainer.fit(LogsPerRank(), DataLoader(regression_data(16), batch_size=4))
    metrics = {key: float(value) for key, value in trainer.callback_metrics.items()}
    assert metrics["rank_mean_step"] == 0.5 and metrics["rank_mean_epoch"] == 0.5
    assert metrics["rank_sum"] == 3.0  # 1 + 2
    assert metrics["rank_max"] == 1.0
    assert metrics["rank_local"] == 0.0  # not synced: rank 0's own


class LogsWithItsOwnReduction(Regressor):
    def training_step(self, batch, batch_idx):
        self.log("rank", float(self.global_rank), reduce_fx=lambda values: values.max(), sync_dist=True)
        return super().training_step(batch, batch_idx)


def test_sync_dist_with_a_reduce_fx_of_ones_own_says_it_cannot_be_synced():
    # one process: nothing to sync, the callable reduces the epoch; several: an error, not an unsynced value
    trainer = quiet_trainer(devices=1, max_epochs=1)
    trainer.fit(LogsWithItsOwnReduction(), DataLoader(regression_data(16), batch_size=4))
    assert float(trainer.callback_metrics["rank"]) == 0.0
    with pytest.raises(framework.MisconfigurationError, match=r"reduce_fx=.*sync_dist=True.*cannot be applied"):
        quiet_trainer(devices=2, max_epochs=1).fit(LogsWithItsOwnReduction(), DataLoader(regression_data(16), 4))


class StopsOnRankOne(Regressor):
    def on_train_batch_end(self, outputs, batch, batch_idx):
        if self.global_rank == 1 and self.trainer.global_step == 3:
            self.trainer.should_stop = True


def _fit_and_report(rank: int, model_class: type) -> tuple[int, int]:
    trainer = quiet_trainer(devices=2, max_epochs=5)
    trainer.fit(model_class(), DataLoader(regression_data(64), batch_size=4))
    return trainer.global_step, trainer.current_epoch


def test_should_stop_set_on_one_rank_stops_every_rank_at_the_same_step():
    # Both stop after the same batch: the one after the wish (the ranks agree while it trains). The cut
    # epoch counts as run, as in one process.
    assert spawn(2, _fit_and_report, StopsOnRankOne) == [(4, 1), (4, 1)]


def _fit_with_a_timer_only_rank_one_runs_out_of(rank: int) -> tuple[int, int]:
    from datetime import timedelta

    timer = framework.callbacks.Timer(duration=timedelta(microseconds=1 if rank == 1 else 10**10), interval="step")
    trainer = quiet_trainer(devices=2, max_epochs=5, callbacks=[timer])
    trainer.fit(Regressor(), DataLoader(regression_data(64), batch_size=4))
    return trainer.global_step, trainer.current_epoch


def test_a_timer_running_out_on_one_rank_stops_every_rank_at_the_same_step():
    assert spawn(2, _fit_with_a_timer_only_rank_one_runs_out_of) == [(2, 1), (2, 1)]


class EarlyStopsOnRankOne(Regressor):
    def validation_step(self, batch, batch_idx):
        # rank 1 sees its loss rise every epoch, rank 0 sees it fall: only rank 1 wants to stop
        value = float(self.current_epoch) if self.global_rank == 1 else -float(self.current_epoch)
        self.log("watched", value)

    def configure_callbacks(self):
        return [framework.callbacks.EarlyStopping("watched", patience=1)]


def _fit_with_validation(rank: int) -> tuple[int, int]:
    trainer = quiet_trainer(devices=2, max_epochs=10)
    data = DataLoader(regression_data(16), batch_size=4)
    trainer.fit(EarlyStopsOnRankOne(), data, data)
    return trainer.global_step, trainer.current_epoch


def test_early_stopping_decided_on_one_rank_stops_all():
    results = spawn(2, _fit_with_validation)
    assert results[0] == results[1] == (4, 2)  # 2 steps per epoch per rank; stops after epoch 1's check


# -- failures -----------------------------------------------------------------------------------------------

class FailsOnRankOne(Regressor):
    def training_step(self, batch, batch_idx):
        if self.global_rank == 1 and batch_idx == 2:
            raise ValueError("rank one cannot go on")
        return super().training_step(batch, batch_idx)


class DiesOnRankOne(Regressor):
    def training_step(self, batch, batch_idx):
        if self.global_rank == 1 and batch_idx == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().training_step(batch, batch_idx)


class ExitsOnRankOne(Regressor):
    def training_step(self, batch, batch_idx):
        if self.global_rank == 1 and batch_idx == 2:
            sys.exit(5)
        return super().training_step(batch, batch_idx)


def _children_of_this_process() -> list[int]:
    me = str(os.getpid())
    children = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z":
            children.append(int(pid))
    return children


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="counts child processes through /proc")
@pytest.mark.parametrize(("model_class", "expected", "match"), [
    (FailsOnRankOne, ValueError, "rank one cannot go on"),
    (DiesOnRankOne, RankExitedError, "Rank 1 of 2 was killed by SIGKILL"),
    (ExitsOnRankOne, SystemExit, "5"),
])
def test_a_failing_rank_stops_the_others_and_its_error_reaches_the_caller(model_class, expected, match):
    before = set(_children_of_this_process())
    started = time.monotonic()
    with pytest.raises(expected, match=match) as info:
        quiet_trainer(devices=2, max_epochs=1).fit(model_class(), DataLoader(regression_data(64), batch_size=4))
    assert time.monotonic() - started < 30
    assert set(_children_of_this_process()) <= before  # nothing left running
    if expected is not RankExitedError:
        assert "Raised on rank 1 of 2" in "".join(getattr(info.value, "__notes__", []))
    if expected is ValueError:
        assert "training_step" in str(info.value.__cause__)  # the rank's own traceback


def _collective_loses_its_peer(rank: int, peer_dies: bool, error: type[BaseException]) -> None:
    """Rank 0 fails at once as a collective does whose peer is gone; rank 1 is killed a moment later (or lives)."""
    # both past the group's start first: on a loaded machine rank 1 was once still joining when rank 0 ended, and
    # failed there instead of being killed (a suite run under -n 2)
    torch.distributed.barrier()
    if rank == 0:
        raise error("[gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:48299")
    time.sleep(0.05)  # "a moment": on a loaded machine a longer wait can outlast the launcher's grace period
    if peer_dies:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(30)


@pytest.mark.parametrize(("peer_dies", "error", "expected", "match"), [
    (True, RuntimeError, RankExitedError, "Rank 1 of 2 was killed by SIGKILL"),
    (False, RuntimeError, RuntimeError, "Connection closed by peer"),
    (True, ValueError, ValueError, "Connection closed by peer"),  # not a collective's error: reported as it is
])
def test_a_rank_killed_just_after_another_lost_it_in_a_collective_is_reported_as_the_cause(peer_dies, error,
                                                                                            expected, match):
    started = time.monotonic()
    with pytest.raises(expected, match=match) as info:
        spawn(2, _collective_loses_its_peer, peer_dies, error)
    assert time.monotonic() - started < 10
    if expected is RankExitedError:
        assert "Connection closed by peer" in str(info.value.__cause__)  # what rank 0 saw, kept


class FailsAtBatchTwo(Regressor):
    def __init__(self, failing_rank: int, error: type[BaseException]) -> None:
        super().__init__()
        self.failing_rank, self.error = failing_rank, error

    def training_step(self, batch, batch_idx):
        if self.global_rank == self.failing_rank and batch_idx == 2:
            raise self.error("stopped here")
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("failing_rank", [0, 1])
def test_save_on_exception_saves_what_the_failing_rank_can_without_waiting_for_the_others(tmp_path, failing_rank):
    checkpoint = framework.callbacks.ModelCheckpoint(dirpath=tmp_path, save_on_exception=True)
    trainer = quiet_trainer(devices=2, max_epochs=1, enable_checkpointing=True, callbacks=[checkpoint],
                            strategy=framework.strategies.DDPStrategy(timeout=30))
    started = time.monotonic()
    with pytest.raises(ValueError, match="stopped here"):  # the rank's own error, not a collective's timeout
        trainer.fit(FailsAtBatchTwo(failing_rank, ValueError), DataLoader(regression_data(64), batch_size=4))
    assert time.monotonic() - started < 20
    # rank 0 writes the files: it saves when it is the one failing; a failure elsewhere finds it inside a step
    assert os.listdir(tmp_path) == (["epoch=0-step=2.ckpt"] if failing_rank == 0 else [])


def test_a_keyboard_interrupt_on_one_rank_stops_all_and_reaches_the_caller():
    trainer = quiet_trainer(devices=2, max_epochs=1, strategy=framework.strategies.DDPStrategy(timeout=30))
    started = time.monotonic()
    with pytest.warns(UserWarning, match="KeyboardInterrupt"), pytest.raises(KeyboardInterrupt):
        trainer.fit(FailsAtBatchTwo(1, KeyboardInterrupt), DataLoader(regression_data(64), batch_size=4))
    assert time.monotonic() - started < 20 and trainer.interrupted


class _Prints(framework.callbacks.Callback):
    def on_train_end(self, trainer, module):
        # One write per line: two ranks' print() calls (text, then newline) could interleave on the shared stdout.
        os.write(1, f"rank {trainer.global_rank} ends, sees {os.environ.get('FRAMEWORK_TEST_MARK')}\n".encode())


def test_spawned_and_forkserver_ranks_train_like_forked_ones_print_and_see_the_callers_environment(capfd,
                                                                                                    monkeypatch):
    def train(start_method: str) -> dict[str, torch.Tensor]:
        torch.manual_seed(2)
        model = Regressor()
        strategy = framework.strategies.DDPStrategy(start_method=start_method)
        quiet_trainer(devices=2, strategy=strategy, max_epochs=1, callbacks=[_Prints()]).fit(
            model, DataLoader(regression_data(32), 4))
        return model.state_dict()

    forked = train("fork")
    with capfd.disabled():  # the forkserver starts (if no earlier test started it) with other standard streams
        train("forkserver")
    for start_method in ("spawn", "forkserver"):
        monkeypatch.setenv("FRAMEWORK_TEST_MARK", start_method)  # set after the forkserver started
        capfd.readouterr()
        started = train(start_method)
        for name, value in forked.items():
            assert torch.equal(value, started[name]), (start_method, name)
        printed = sorted(capfd.readouterr().out.split("\n")[:-1])
        assert printed == [f"rank {rank} ends, sees {start_method}" for rank in (0, 1)]


# -- the Runtime, for hand-written loops -------------------------------------------------------------------

def _collectives(runtime: framework.Runtime) -> dict:
    rank = runtime.global_rank
    value = torch.tensor([float(rank + 1)])
    return {
        "mean": runtime.all_reduce(value, reduce_op="mean").item(),
        "sum": runtime.all_reduce(value, reduce_op="sum").item(),
        "max": runtime.all_reduce(value, reduce_op="max").item(),
        "gathered": runtime.all_gather(value).flatten().tolist(),
        "broadcast": runtime.broadcast({"from": rank}, src=1),
        "input_kept": value.item(),
        "ranks": (runtime.world_size, rank, runtime.is_global_zero),
    }


def test_runtime_launch_without_a_function_runs_the_rest_of_the_script_on_every_rank(tmp_path):
    script = tmp_path / "fabric_style.py"
    script.write_text(
        "import sys, torch\n"
        "from framework import Runtime as Fabric\n"
        "fabric = Fabric(accelerator='cpu', devices=2, strategy='ddp')\n"
        "fabric.launch()\n"
        "total = fabric.all_reduce(torch.tensor(float(fabric.global_rank + 1)), reduce_op='sum')\n"
        "with open(f'{sys.argv[1]}/rank{fabric.global_rank}', 'w') as out:\n"
        "    out.write(f'{fabric.world_size} {total.item()}')\n"
        "if fabric.global_rank == 1 and len(sys.argv) > 2:\n"
        "    raise RuntimeError('rank 1 fails')\n"
        "fabric.barrier()\n"
    )
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env=environment)
    assert done.returncode == 0, done.stderr
    assert [(tmp_path / f"rank{rank}").read_text() for rank in (0, 1)] == ["2 3.0", "2 3.0"]
    started = time.monotonic()
    failing = subprocess.run([sys.executable, str(script), str(tmp_path), "fail"], capture_output=True, text=True,
                             timeout=120, env=environment)
    assert failing.returncode != 0 and time.monotonic() - started < 60
    # A rank that ends with an exception leaves its gloo group open (its peers may be inside a collective), and gloo
    # tearing down at the interpreter's exit sometimes aborts it: code 1, or -6 (SIGABRT) on a loaded machine.
    assert "rank 1 fails" in failing.stderr, failing.stderr
    assert re.search(r"Rank 1 of 2 exited with code (1|-6) \(its error is above\)", failing.stderr), failing.stderr


def test_runtime_launch_runs_a_function_on_every_rank():
    runtime = framework.Runtime(accelerator="cpu", devices=3)
    assert runtime.needs_launch
    results = runtime.run_in_ranks(_collectives)
    for rank, result in enumerate(results):
        assert result["mean"] == 2.0 and result["sum"] == 6.0 and result["max"] == 3.0
        assert result["gathered"] == [1.0, 2.0, 3.0]
        assert result["broadcast"] == {"from": 1}
        assert result["input_kept"] == rank + 1  # the collectives return new tensors
        assert result["ranks"] == (3, rank, rank == 0)
    assert runtime.launch(_collectives)["ranks"] == (3, 0, True)  # launch returns rank 0's


def _gradients_inside_and_outside_no_sync(runtime: framework.Runtime) -> list[bool]:
    torch.manual_seed(0)
    model = runtime.setup(torch.nn.Linear(2, 1))
    x = torch.full((1, 2), float(runtime.global_rank + 1))
    agreed = []
    for synced in (False, True):
        model.zero_grad()
        with runtime.no_backward_sync(model, enabled=not synced):
            model(x).sum().backward()
        gathered = runtime.all_gather(next(model.parameters()).grad)
        agreed.append(torch.equal(gathered[0], gathered[1]))
    return agreed


def test_no_backward_sync_skips_the_gradient_all_reduce():
    runtime = framework.Runtime(accelerator="cpu", devices=2, strategy="ddp")
    assert runtime.launch(_gradients_inside_and_outside_no_sync) == [False, True]


def test_runtime_without_started_ranks_says_how_to_start_them():
    runtime = framework.Runtime(accelerator="cpu", devices=2)
    with pytest.raises(framework.MisconfigurationError, match=r"running pytest again.*runtime.launch\(fn\)"):
        runtime.launch()
    forking = framework.Runtime(accelerator="cpu", devices=2, strategy="ddp_fork")
    with pytest.raises(framework.MisconfigurationError, match=r"runtime.launch\(train\)"):
        forking.launch()
    with pytest.raises(framework.MisconfigurationError, match="before the 2 processes of this Runtime were started"):
        runtime.setup(torch.nn.Linear(2, 2))
    with pytest.raises(framework.MisconfigurationError, match=r"runtime.setup_dataloaders\(\) before"):
        runtime.setup_dataloaders(DataLoader(regression_data(8), batch_size=2))


def _nested_numbers(runtime: framework.Runtime) -> tuple:
    rank = runtime.global_rank
    reduced = runtime.all_reduce({"acc": float(rank), "seen": [rank + 1, torch.tensor(2.0)]}, reduce_op="sum")
    gathered = runtime.all_gather({"n": rank + 1})
    return float(reduced["acc"]), [float(v) for v in reduced["seen"]], gathered["n"].tolist()


def test_collectives_take_numbers_at_any_depth_of_a_collection():
    results = framework.Runtime(accelerator="cpu", devices=2).run_in_ranks(_nested_numbers)
    assert results == [(1.0, [3.0, 4.0], [1, 2])] * 2


def _custom_order_shares(runtime: framework.Runtime) -> list[int]:
    subset = torch.utils.data.SubsetRandomSampler([0, 1, 2, 3], generator=torch.Generator().manual_seed(0))
    loader = runtime.setup_dataloaders(DataLoader(TensorDataset(torch.arange(10)), batch_size=1, sampler=subset))
    return sorted(int(index) for (batch,) in loader for index in batch)


def test_setup_dataloaders_keeps_a_custom_samplers_order_and_deals_it_out():
    shares = framework.Runtime(accelerator="cpu", devices=2).run_in_ranks(_custom_order_shares)
    assert sorted(shares[0] + shares[1]) == [0, 1, 2, 3] and len(shares[0]) == len(shares[1]) == 2


def test_ddp_options_are_checked_and_passed_to_ddp():
    with pytest.raises(framework.MisconfigurationError, match="start_method='thread'"):
        framework.strategies.DDPStrategy(start_method="thread")
    with pytest.raises(framework.MisconfigurationError, match="timeout=-1"):
        framework.strategies.DDPStrategy(timeout=-1)
    runtime = framework.Runtime(accelerator="cpu", devices=2,
                                strategy=framework.strategies.DDPStrategy(find_unused_parameters=True, timeout=20))
    assert runtime.launch(_wrapper_settings) == (True, 20.0)


def _wrapper_settings(runtime: framework.Runtime) -> tuple[bool, float]:
    model = runtime.setup(torch.nn.Linear(2, 2))
    return model._forward_module.find_unused_parameters, runtime.strategy.timeout.total_seconds()


def _total(rank: int) -> float:
    value = torch.tensor([rank + 1.0])
    torch.distributed.all_reduce(value)
    return value.item()


def _fails_on_rank_one(rank: int) -> None:
    if rank == 1:
        raise KeyError("missing on rank 1")
    torch.distributed.barrier()


def test_testing_spawn_joins_a_gloo_group_and_reraises():
    assert spawn(2, _total) == [3.0, 3.0]
    with pytest.raises(KeyError, match="missing on rank 1"):
        spawn(2, _fails_on_rank_one)


def _parallel_matmul(rank: int, a: torch.Tensor) -> float:
    import faulthandler

    faulthandler.dump_traceback_later(30, exit=True)  # a hang fails the test instead of blocking it
    torch.set_num_threads(2)
    result = float((a @ a).sum())
    faulthandler.cancel_dump_traceback_later()
    return result


def test_forked_ranks_run_parallel_operations_after_the_caller_did():
    # The caller's OpenMP thread pool is copied into a fork without its threads: a parallel operation in the fork's
    # main thread would wait for them forever.
    a = torch.randn(1000, 1000)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        expected = float((a @ a).sum())
        assert spawn(2, _parallel_matmul, a) == [pytest.approx(expected)] * 2
    finally:
        torch.set_num_threads(threads)


def _fabric_style_loop(runtime: framework.Runtime, accumulate: int, path: str) -> dict[str, torch.Tensor]:
    """The loop of a Fabric script: setup, setup_dataloaders, backward, optimizer.step, no_backward_sync, save."""
    torch.manual_seed(0)
    model = Regressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=model.lr, momentum=0.9)
    model, optimizer = runtime.setup(model, optimizer)
    loader = runtime.setup_dataloaders(DataLoader(regression_data(), batch_size=4))
    for _ in range(2):
        for index, (x, y) in enumerate(loader):
            stepping = (index + 1) % accumulate == 0
            with runtime.no_backward_sync(model, enabled=not stepping):
                runtime.backward(torch.nn.functional.mse_loss(model(x), y) / accumulate)
            if stepping:
                optimizer.step()
                optimizer.zero_grad()
    runtime.save(path, {"model": model, "optimizer": optimizer, "epochs": 2})
    state = {"model": model, "epochs": 0}
    rest = runtime.load(path, state)
    assert state["epochs"] == 2 and set(rest) == {"optimizer"}
    return {name: value.clone() for name, value in model.state_dict().items()}


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_fabric_style_loop_on_two_ranks_equals_one_process_with_the_doubled_batch(tmp_path, accumulate):
    torch.manual_seed(0)
    reference = plain_pytorch_weights(Regressor(), regression_data(), batch_size=8, epochs=2, accumulate=accumulate)
    runtime = framework.Runtime(accelerator="cpu", devices=2, strategy="ddp")
    results = runtime.run_in_ranks(_fabric_style_loop, accumulate, str(tmp_path / "state.ckpt"))
    for rank_weights in results:
        for name, value in rank_weights.items():
            torch.testing.assert_close(value, reference[name], rtol=1e-5, atol=1e-6, msg=name)
    saved = torch.load(tmp_path / "state.ckpt", weights_only=True)
    assert saved["epochs"] == 2 and set(saved["model"]) == set(reference)


def _shards_and_order(runtime: framework.Runtime) -> list[list[int]]:
    loader = runtime.setup_dataloaders(DataLoader(TensorDataset(torch.arange(10)), batch_size=2, shuffle=True))
    return [[int(i) for (batch,) in loader for i in batch] for _ in range(2)]


def test_setup_dataloaders_shards_and_reshuffles_each_pass_alike_on_every_rank():
    framework.seed_everything(0, verbose=False)
    rank0, rank1 = framework.Runtime(accelerator="cpu", devices=2).run_in_ranks(_shards_and_order)
    for epoch in range(2):
        assert sorted(rank0[epoch] + rank1[epoch]) == list(range(10))  # each sample on one rank
    assert rank0[0] != rank0[1]  # reshuffled on the second pass


def _first_and_printing(runtime: framework.Runtime, path: str) -> bool:
    with runtime.rank_zero_first():
        if runtime.global_rank == 0:
            time.sleep(0.2)
            with open(path, "w") as file:
                file.write("ready")
        seen = os.path.exists(path)
    runtime.print(f"printed by rank {runtime.global_rank}")
    return seen


def test_rank_zero_first_and_print(tmp_path, capfd):
    results = framework.Runtime(accelerator="cpu", devices=2).run_in_ranks(_first_and_printing,
                                                                          str(tmp_path / "marker"))
    assert results == [True, True]
    assert capfd.readouterr().out.count("printed by rank") == 1


REPL_SESSION = """
import torch, framework
from torch.utils.data import DataLoader, TensorDataset

class Tiny(framework.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).square().mean()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

trainer = framework.Trainer(accelerator="cpu", devices=2, strategy=STRATEGY, max_epochs=1, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
try:
    trainer.fit(Tiny(), DataLoader(TensorDataset(torch.randn(16, 2)), batch_size=4))
    print("steps", trainer.global_step)
except framework.MisconfigurationError as error:
    print("refused:", error)

"""


@pytest.mark.parametrize(("strategy", "cuda_present"), [("ddp", False), ("ddp", True), ("ddp_spawn", False)])
def test_a_module_typed_into_a_repl_trains_on_two_ranks_or_gets_told_why_not(strategy, cuda_present):
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    if cuda_present:  # as on a GPU machine (tests/fake_cuda/sitecustomize.py)
        environment["PYTHONPATH"] = str(Path(__file__).resolve().parents[1] / "fake_cuda")
    else:
        environment["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run([sys.executable, "-q", "-i"], input=REPL_SESSION.replace("STRATEGY", repr(strategy)),
                          capture_output=True, text=True, timeout=120, env=environment)
    assert done.returncode == 0, done.stderr
    if strategy == "ddp" and not cuda_present:  # forks: nothing needs pickling
        assert "steps 2" in done.stdout
    else:  # spawned, or from a forkserver: the typed-in class cannot reach the ranks, and no rank is started
        assert "refused: The ranks are started with" in done.stdout
        assert "Tiny is defined in a notebook, a REPL or `python -c`" in done.stdout and "ddp_fork" in done.stdout
    if cuda_present:
        assert "not chosen by default because this machine has 2 CUDA devices" in done.stdout


def _fit_without_sharding(rank: int) -> tuple[int, list[int]]:
    seen: list[int] = []

    class Records(Regressor):
        def training_step(self, batch, batch_idx):
            seen.extend(int(i) for i in batch[0][:, 0].round())
            return super().training_step(batch, batch_idx)

    data = TensorDataset(torch.arange(16.0).repeat(FEATURES, 1).T, torch.zeros(16, 1))
    trainer = quiet_trainer(devices=2, max_epochs=1, use_distributed_sampler=False)
    trainer.fit(Records(), DataLoader(data, batch_size=4))
    return trainer.global_step, sorted(seen)


class RecordsSamples(Regressor):
    def training_step(self, batch, batch_idx):
        self.seen = [*getattr(self, "seen", []), batch[0][:, 0].tolist()]
        return super().training_step(batch, batch_idx)


def test_a_fraction_of_overfit_batches_is_taken_of_the_whole_loader():
    trainer = quiet_trainer(devices=2, max_epochs=1, overfit_batches=0.1)  # 10 batches: 1, sharded over 2 ranks
    trainer.fit(Regressor(), DataLoader(regression_data(40), batch_size=4))
    assert trainer.global_step == 1


def _overfitted_batches(rank: int) -> list:
    model = RecordsSamples()
    trainer = quiet_trainer(devices=2, max_epochs=2, overfit_batches=2)
    trainer.fit(model, DataLoader(regression_data(32), batch_size=2, shuffle=True))
    return model.seen


def test_overfit_batches_shards_the_same_first_batches_over_the_ranks():
    rank0, rank1 = spawn(2, _overfitted_batches)
    first = regression_data(32).tensors[0][:8, 0].tolist()
    assert rank0 == [first[0:4:2], first[4:8:2]] * 2 and rank1 == [first[1:4:2], first[5:8:2]] * 2


def test_use_distributed_sampler_false_leaves_the_loader_whole_on_every_rank():
    assert spawn(2, _fit_without_sharding) == [(4, list(range(16)))] * 2


class PreparesData(Regressor):
    def __init__(self, folder: str, per_node: bool) -> None:
        super().__init__()
        self.folder = folder
        self.prepare_data_per_node = per_node

    def prepare_data(self):
        with open(os.path.join(self.folder, f"prepared-by-{self.global_rank}"), "w"):
            pass


@pytest.mark.parametrize("per_node", [True, False])
def test_prepare_data_runs_once(tmp_path, per_node):
    quiet_trainer(devices=2, max_steps=1).fit(PreparesData(str(tmp_path), per_node),
                                              DataLoader(regression_data(16), batch_size=4))
    assert os.listdir(tmp_path) == ["prepared-by-0"]


def test_two_ranks_resumed_inside_an_epoch_end_as_an_uninterrupted_run(tmp_path):
    def fit(max_steps: int, ckpt_path: str | None = None) -> dict[str, torch.Tensor]:
        framework.seed_everything(7, verbose=False)
        model = Regressor()
        checkpoint = framework.callbacks.ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=5, save_last=True,
                                                         save_top_k=0)
        trainer = framework.Trainer(accelerator="cpu", devices=2, max_steps=max_steps, callbacks=[checkpoint],
                                    logger=False, enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(model, DataLoader(regression_data(), batch_size=4, shuffle=True), ckpt_path=ckpt_path)
        return model.state_dict()

    uninterrupted = fit(12)
    fit(5)  # 8 steps per epoch: stops inside the first epoch
    resumed = fit(12, ckpt_path=str(tmp_path / "last.ckpt"))
    for name, value in uninterrupted.items():
        assert torch.equal(value, resumed[name]), name


# -- what every rank must do alike, even when their data or hooks differ ---------------------------------------

class ValidatesTiny(Regressor):
    def validation_step(self, batch, batch_idx):
        self.log("val_loss", torch.nn.functional.mse_loss(self(batch[0]), batch[1]), sync_dist=True)


def test_a_rank_without_validation_batches_still_joins_the_epoch_end(tmp_path):
    one_sample = DataLoader(regression_data(1), batch_size=4)  # rank 1's part is empty
    trainer = quiet_trainer(devices=2, max_epochs=2, num_sanity_val_steps=2)
    trainer.fit(ValidatesTiny(), DataLoader(regression_data(16), batch_size=4), one_sample)
    assert trainer.current_epoch == 2 and "val_loss" in trainer.callback_metrics
    assert quiet_trainer(devices=2).validate(ValidatesTiny(), one_sample, verbose=False)[0]["val_loss"] > 0


class ValidatesTinyUnsynced(Regressor):
    """Logs its validation loss without sync_dist, and as a torchmetrics Metric."""

    def __init__(self) -> None:
        super().__init__()
        self.val_mse = torchmetrics.MeanSquaredError()

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self(x), y))
        self.val_mse(self(x), y)
        self.log("val_mse", self.val_mse)


def test_callbacks_monitoring_a_value_that_a_rank_without_validation_batches_lacks_do_not_hang(tmp_path):
    # Rank 1 has no validation batch: it has no val_loss, and its Metric was never updated. Within the timeout
    # every rank must still reach the same collectives: the Metric's sync, EarlyStopping's vote, and
    # ModelCheckpoint's choice of when (val_check_interval=0.5) and under which name to save.
    checkpoint = framework.callbacks.ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_last=True,
                                                     filename="{epoch}-{val_loss:.3f}")
    stopping = framework.callbacks.EarlyStopping("val_loss", patience=100, strict=True)
    trainer = quiet_trainer(devices=2, max_epochs=2, val_check_interval=0.5, enable_checkpointing=True,
                            callbacks=[checkpoint, stopping], strategy=framework.strategies.DDPStrategy(timeout=20))
    one_sample = DataLoader(regression_data(1), batch_size=4)
    trainer.fit(ValidatesTinyUnsynced(), DataLoader(regression_data(16), batch_size=4), one_sample)
    assert trainer.global_step == 4
    assert float(trainer.callback_metrics["val_mse"]) == pytest.approx(float(trainer.callback_metrics["val_loss"]))
    assert len([name for name in os.listdir(tmp_path) if name.startswith("epoch=")]) == 1
    assert os.path.exists(tmp_path / "last.ckpt")
    results = quiet_trainer(devices=2, strategy=framework.strategies.DDPStrategy(timeout=20)).validate(
        ValidatesTinyUnsynced(), one_sample, verbose=False)
    assert results[0]["val_mse"] == pytest.approx(results[0]["val_loss"])


class KeepsPredictionsInMetrics(Regressor):
    """Metrics whose states are lists (of 2-d float and of integer tensors), and one that does not sync."""

    def __init__(self) -> None:
        super().__init__()
        self.auroc = torchmetrics.classification.MulticlassAUROC(num_classes=2, thresholds=None)
        self.local_max = torchmetrics.MaxMetric(sync_on_compute=False)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        prediction = self(x)
        self.auroc.update(torch.cat([prediction, -prediction], dim=1).softmax(dim=1), (y.squeeze(1) > 0).long())
        self.local_max.update(prediction.max())
        self.log("auroc", self.auroc)
        self.log("local_max", self.local_max)


def test_metrics_keeping_lists_sync_even_with_a_rank_that_had_no_batch():
    torch.manual_seed(0)
    model = KeepsPredictionsInMetrics()
    data = DataLoader(regression_data(2, seed=1), batch_size=8)  # one sample of each class
    expected = quiet_trainer(devices=1).validate(model, data, verbose=False)[0]
    # 3 ranks, 2 samples: rank 2 has no batch, and its stand-ins must join the AUROC's gathers of a 2-d float and
    # an integer list state; the MaxMetric does not sync, so no stand-in is made for it
    results = quiet_trainer(devices=3, strategy=framework.strategies.DDPStrategy(timeout=20)).validate(
        model, data, verbose=False)[0]
    assert results["auroc"] == pytest.approx(expected["auroc"])
    assert "local_max" in results


class TagsCheckpointsPerRank(Regressor):
    def training_step(self, batch, batch_idx):
        self.log("tag", 1.0 if self.global_rank == 0 else float(batch_idx))  # not synced: differs by rank
        return super().training_step(batch, batch_idx)


def test_checkpoint_names_from_values_that_differ_by_rank_are_rank_zeros(tmp_path):
    checkpoint = framework.callbacks.ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, filename="{tag:.0f}")
    trainer = quiet_trainer(devices=2, max_epochs=1, enable_checkpointing=True, callbacks=[checkpoint],
                            strategy=framework.strategies.DDPStrategy(timeout=20))
    trainer.fit(TagsCheckpointsPerRank(), DataLoader(regression_data(32), batch_size=4))
    assert sorted(os.listdir(tmp_path)) == ["tag=1.ckpt"]


class WithBatchNorm(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.BatchNorm1d(8), torch.nn.Tanh(),
                                       torch.nn.Linear(8, 1))

    def validation_step(self, batch, batch_idx):
        self.statistics_seen = self.net[1].running_mean.clone()


def _statistics_validation_sees(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    model = WithBatchNorm()
    trainer = quiet_trainer(devices=2, max_epochs=1, num_sanity_val_steps=0)
    trainer.fit(model, DataLoader(regression_data(32), batch_size=4, shuffle=True), DataLoader(regression_data(8), 4))
    return model.statistics_seen, model.net[1].running_mean.clone()


def test_every_rank_validates_with_rank_zeros_batch_norm_statistics():
    (seen0, kept0), (seen1, kept1) = spawn(2, _statistics_validation_sees)
    assert torch.equal(seen0, seen1) and torch.equal(seen0, kept0)  # the statistics rank 0 checkpoints
    assert torch.equal(kept0, kept1)


class LogsAMetricPerRank(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.mean_rank = torchmetrics.MeanMetric()

    def training_step(self, batch, batch_idx):
        self.mean_rank.update(torch.tensor(float(self.global_rank)))
        self.log("mean_rank", self.mean_rank, on_step=False, on_epoch=True, prog_bar=True)
        self.log("synced_rank", float(self.global_rank), on_step=False, on_epoch=True, sync_dist=True)
        return super().training_step(batch, batch_idx)


def test_epoch_end_readers_see_synced_values_and_run_no_collective(tmp_path):
    checkpoint = framework.callbacks.ModelCheckpoint(dirpath=tmp_path, monitor="synced_rank", mode="max")
    trainer = framework.Trainer(accelerator="cpu", devices=2, max_epochs=1, logger=False, callbacks=[checkpoint],
                                enable_model_summary=False)  # the progress bar reads on rank 0 only
    trainer.fit(LogsAMetricPerRank(), DataLoader(regression_data(16), batch_size=4))
    assert float(trainer.callback_metrics["mean_rank"]) == 0.5
    assert float(checkpoint.best_model_score) == 0.5  # the synced value, not rank 0's 0.0
    assert os.path.basename(checkpoint.best_model_path) == "epoch=0-step=2.ckpt"


class StopsInValidationOnRankOne(ValidatesTiny):
    def on_validation_end(self):
        if self.global_rank == 1 and not self.trainer.sanity_checking:
            self.trainer.should_stop = True


def _fit_stopped_in_validation(rank: int) -> tuple[int, int]:
    trainer = quiet_trainer(devices=2, max_epochs=5, val_check_interval=2)
    data = DataLoader(regression_data(32), batch_size=4)
    trainer.fit(StopsInValidationOnRankOne(), data, data)
    return trainer.global_step, trainer.current_epoch


def test_should_stop_set_in_validation_on_one_rank_stops_all_at_that_batch():
    assert spawn(2, _fit_stopped_in_validation) == [(2, 1), (2, 1)]


def _unshuffled_parts(runtime: framework.Runtime) -> tuple[list[int], list[int]]:
    data = TensorDataset(torch.arange(9))
    even = runtime.setup_dataloaders(DataLoader(data, batch_size=4))
    exact = runtime.setup_dataloaders(DataLoader(data, batch_size=4), even_batches=False)
    return [int(i) for (batch,) in even for i in batch], [int(i) for (batch,) in exact for i in batch]


def test_setup_dataloaders_pads_like_fabric_unless_even_batches_is_false():
    (even0, exact0), (even1, exact1) = framework.Runtime(accelerator="cpu", devices=2).run_in_ranks(_unshuffled_parts)
    assert len(even0) == len(even1) == 5 and sorted(set(even0 + even1)) == list(range(9))  # one sample twice
    assert sorted(exact0 + exact1) == list(range(9))  # each once: 5 and 4


class NeedsTwoArguments(Exception):
    def __init__(self, what: str, detail: int) -> None:
        super().__init__(f"{what} ({detail})")


def _raises_an_exception_that_pickles_but_cannot_be_rebuilt(rank: int) -> None:
    raise NeedsTwoArguments("odd failure", 7)


def test_an_exception_that_cannot_be_rebuilt_still_reaches_the_caller_with_its_rank():
    with pytest.raises(RuntimeError, match=r"NeedsTwoArguments: odd failure \(7\)") as info:
        spawn(2, _raises_an_exception_that_pickles_but_cannot_be_rebuilt)
    assert "Raised on rank" in "".join(getattr(info.value, "__notes__", []))


class StopsAtEpochEndOnRankOne(Regressor):
    def on_train_epoch_end(self):
        if self.global_rank == self.stopping_rank:
            self.trainer.should_stop = True


def _fit_held_by_min_steps(rank: int, devices: int) -> int:
    model = StopsAtEpochEndOnRankOne()
    model.stopping_rank = devices - 1
    trainer = quiet_trainer(devices=devices, max_epochs=5, min_steps=9)
    trainer.fit(model, DataLoader(regression_data(64), batch_size=8 // devices))
    return trainer.global_step


def test_a_stop_held_back_by_min_steps_ends_training_at_the_same_step_as_one_process():
    # 8 steps an epoch: the stop wished at the end of epoch 0 waits for min_steps=9 and ends training right after
    # step 9, on two ranks as on one (the agreed wish must not lapse at the next epoch's first batch).
    assert _fit_held_by_min_steps(0, 1) == 9
    assert spawn(2, _fit_held_by_min_steps, 2) == [9, 9]


class _EpochCounter:
    def __init__(self) -> None:
        self.epochs: list[int] = []

    def on_train_epoch_end(self, epoch):
        self.epochs.append(epoch)


def _logs_from_every_rank(runtime: framework.Runtime) -> tuple[list[int], str]:
    for epoch in range(2):
        runtime.log("rank", float(runtime.global_rank), step=epoch)
        runtime.call("on_train_epoch_end", epoch=epoch)
    if runtime.is_global_zero:
        os.makedirs(runtime.logger.log_dir, exist_ok=True)  # rank 0's run directory exists now ...
    runtime.barrier()
    return runtime.callbacks[0].epochs, runtime.logger.log_dir  # ... and rank 1 still names it, not the next one


def test_runtime_loggers_are_written_by_rank_zero_and_flushed_when_the_function_returns(tmp_path):
    from framework.loggers import CSVLogger

    runtime = framework.Runtime(accelerator="cpu", devices=2, callbacks=_EpochCounter(),
                                loggers=CSVLogger(tmp_path, name="run"))
    log_dir = str(tmp_path / "run" / "version_0")
    assert runtime.run_in_ranks(_logs_from_every_rank) == [([0, 1], log_dir)] * 2  # callbacks run on every rank
    assert (tmp_path / "run" / "version_0" / "metrics.csv").read_text().splitlines() == ["rank,step", "0.0,0",
                                                                                          "0.0,1"]
    assert sorted(os.listdir(tmp_path / "run")) == ["version_0"]


def _rank_one_never_arrives(runtime: framework.Runtime) -> None:
    if runtime.global_rank == 1:
        time.sleep(120)
    runtime.all_reduce(torch.ones(1))


def test_a_collective_waiting_longer_than_the_timeout_fails_instead_of_hanging():
    runtime = framework.Runtime(accelerator="cpu", devices=2, strategy=framework.strategies.DDPStrategy(timeout=2))
    started = time.monotonic()
    with pytest.raises(Exception, match="(?i)timed out|timeout") as info:
        runtime.launch(_rank_one_never_arrives)
    assert time.monotonic() - started < 30
    assert "Raised on rank 0 of 2" in "".join(getattr(info.value, "__notes__", []))


class LogsRankInValidation(Regressor):
    def validation_step(self, batch, batch_idx):
        self.log("rank", float(self.global_rank), on_step=True, on_epoch=False, sync_dist=True)


def test_validation_step_values_are_synced_in_the_batches_every_rank_runs(tmp_path):
    from framework.loggers import CSVLogger

    trainer = quiet_trainer(devices=2, logger=CSVLogger(tmp_path, name="run"))
    trainer.validate(LogsRankInValidation(), DataLoader(regression_data(10), batch_size=2), verbose=False)
    # 10 samples: rank 0 runs 3 batches (5 samples), rank 1 runs 3 too: all synced; 9 samples: 3 and 2 batches
    trainer.validate(LogsRankInValidation(), DataLoader(regression_data(9), batch_size=2), verbose=False)
    rows = (tmp_path / "run" / "version_0" / "metrics.csv").read_text().splitlines()
    assert rows == ["rank,step", "0.5,0", "0.5,1", "0.5,2", "0.5,0", "0.5,1", "0.0,2"]  # the last: rank 0 alone


def test_runs_after_a_launched_fit_go_on_in_its_log_files_and_name_the_checkpoint_they_loaded(tmp_path):
    from framework.loggers import CSVLogger

    data = classification_data(20)
    trainer = framework.Trainer(accelerator="cpu", devices=2, max_epochs=2, logger=CSVLogger(tmp_path, name="run"),
                                default_root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False,
                                log_every_n_steps=1)
    model = Classifier()
    trainer.fit(model, DataLoader(data, batch_size=5), DataLoader(data, batch_size=5))
    trainer.validate(model, DataLoader(data, batch_size=5), ckpt_path="best", verbose=False)
    assert trainer.ckpt_path == trainer.checkpoint_callback.best_model_path != ""
    header, *rows = (tmp_path / "run" / "version_0" / "metrics.csv").read_text().splitlines()
    steps = [row.split(",")[header.split(",").index("step")] for row in rows]
    assert steps == ["1", "3", "4"]  # the validations in fit (2 steps an epoch), then validate()
    assert sorted(os.listdir(tmp_path / "run")) == ["version_0"]


class ManualRegressor(Regressor):
    """Steps its optimizer itself: backward runs inside training_step, before DDP's forward has returned."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        x, y = batch
        self.manual_backward(torch.nn.functional.mse_loss(self(x), y))
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.parametrize("strategy", ["ddp", "zero1", "find_unused"])
def test_manual_optimization_syncs_gradients_like_one_process_with_the_doubled_batch(strategy):
    if strategy == "find_unused":  # the reducer is then prepared with the loss, to find what it did not use
        strategy = framework.strategies.DDPStrategy(find_unused_parameters=True)
    torch.manual_seed(0)
    model = ManualRegressor()
    torch.manual_seed(0)
    reference = plain_pytorch_weights(Regressor(), regression_data(), batch_size=8, epochs=2)
    quiet_trainer(devices=2, strategy=strategy, max_epochs=2).fit(model, DataLoader(regression_data(), batch_size=4))
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, reference[name], rtol=1e-5, atol=1e-6, msg=name)


def _reducer_released_at_exit(rank: int) -> tuple[bool, bool]:
    import atexit

    from framework.strategies import ddp

    runtime = framework.Runtime(accelerator="cpu", strategy="ddp")
    model = runtime.setup_module(torch.nn.Linear(4, 2))
    runtime.backward(model(torch.ones(2, 4)).sum())
    wrapped = model._forward_module
    before = "reducer" in wrapped.__dict__
    atexit.unregister(ddp._release_wrapped)  # run here what the exit runs
    ddp._release_wrapped()
    return before, any(name in wrapped.__dict__ for name in ("reducer", "logger", "process_group"))


def test_ddp_reducers_are_released_at_exit_before_interpreter_finalization():
    """Left to finalization, a reducer can abort the process after the script finished (gloo, torch 2.14)."""
    assert spawn(2, _reducer_released_at_exit) == [(True, False), (True, False)]
