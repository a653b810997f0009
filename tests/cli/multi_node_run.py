"""The script tests/cli/test_multi_node.py starts on each of two nodes: written for Trainer(devices=2, num_nodes=2),
or Trainer(devices=DEVICES, num_nodes=2).

Usage: multi_node_run.py OUT_DIR STRATEGIES [FAILING_RANK WHEN [DEVICES]]

Fits the Regressor of tests/strategies/ddp_models.py for one epoch (batch 2 per rank) with each strategy of the
comma-separated STRATEGIES in turn; each rank writes OUT_DIR/<strategy>-rank<global rank>.pt with what it saw,
OUT_DIR/pid-rank<global rank> first, and OUT_DIR/rank<global rank>.threads with the threads still running at its
last exit handler. With FAILING_RANK, that rank raises ValueError("boom on rank N") at WHEN:
"start" (after building the Trainer, before the ranks join the process group) or a batch index.
"""

import atexit
import os
import sys

import torch
from torch.utils.data import DataLoader

import framework
from tests.strategies.ddp_models import Regressor, regression_data
from tests.strategies.launched_run import write_threads


class FailingRegressor(Regressor):
    def __init__(self, failing_rank: int | None, at_batch: int | None) -> None:
        super().__init__()
        self.failing_rank, self.at_batch = failing_rank, at_batch

    def training_step(self, batch, batch_idx):
        if self.global_rank == self.failing_rank and batch_idx == self.at_batch:
            raise ValueError(f"boom on rank {self.global_rank}")
        return super().training_step(batch, batch_idx)


def whole(tensor: torch.Tensor) -> torch.Tensor:
    """A parameter as one tensor: zero3 leaves each rank a shard (a DTensor; gathering it is a collective)."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def fit(out: str, strategy: str, failing_rank: int | None, when: str | None, devices: int) -> None:
    torch.manual_seed(0)
    model = FailingRegressor(failing_rank, int(when) if when not in (None, "start") else None)
    trainer = framework.Trainer(accelerator="cpu", devices=devices, num_nodes=2, strategy=strategy, max_epochs=1,
                                logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False)
    if when == "start" and trainer.global_rank == failing_rank:
        raise ValueError(f"boom on rank {failing_rank}")
    trainer.fit(model, DataLoader(regression_data(), batch_size=2))
    weights = {name: whole(value).detach().clone() for name, value in model.state_dict().items()}
    sharded = any(hasattr(parameter, "full_tensor") for parameter in model.parameters())
    torch.save({"weights": weights, "sharded": sharded, "world_size": trainer.world_size,
                "node_rank": trainer.node_rank, "local_rank": trainer.local_rank, "global_step": trainer.global_step},
               os.path.join(out, f"{strategy}-rank{trainer.global_rank}.pt"))


def main() -> None:
    out, strategies = sys.argv[1], sys.argv[2].split(",")
    failing_rank, when = (int(sys.argv[3]), sys.argv[4]) if len(sys.argv) > 4 else (None, None)
    devices = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    atexit.register(write_threads, os.path.join(out, f"rank{os.environ['RANK']}.threads"))  # first: runs last
    with open(os.path.join(out, f"pid-rank{os.environ['RANK']}"), "w") as pid:
        pid.write(str(os.getpid()))
    for strategy in strategies:
        fit(out, strategy, failing_rank, when, devices)


if __name__ == "__main__":
    main()
