"""A training script for `framework launch` tests: written for Trainer(devices=..., num_nodes=...), run unchanged.

Usage: launched_run.py OUT_DIR DEVICES NUM_NODES. Each rank writes rank<global rank>.pt with what it saw, and
rank<global rank>.threads with the threads still running at its last exit handler.
"""

import atexit
import os
import sys

import torch
from torch.utils.data import DataLoader

import framework
from tests.strategies.ddp_models import Regressor, regression_data


def main() -> None:
    out, devices, num_nodes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    atexit.register(write_threads, f"{out}/rank{os.environ.get('RANK', '0')}.threads")  # registered first: runs last
    torch.manual_seed(0)
    model = Regressor()
    trainer = framework.Trainer(accelerator="cpu", devices=devices, num_nodes=num_nodes, max_epochs=2, logger=False,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(regression_data(), batch_size=4))
    torch.save({"weights": model.state_dict(), "world_size": trainer.world_size, "node_rank": trainer.node_rank,
                "local_rank": trainer.local_rank, "global_step": trainer.global_step,
                "threads": torch.get_num_threads()}, f"{out}/rank{trainer.global_rank}.pt")


def thread_names() -> list[str]:
    """The names of this process's native threads (Linux; none elsewhere)."""
    names = []
    if os.path.isdir("/proc/self/task"):
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/comm") as comm:
                    names.append(comm.read().strip())
            except FileNotFoundError:  # a thread that ended while listed
                pass
    return sorted(names)


def write_threads(path: "str | os.PathLike[str]") -> None:
    """The names of this process's native threads, once Python's own exit work is done."""
    if os.path.isdir("/proc/self/task"):
        with open(path, "w") as out:
            out.write("\n".join(thread_names()))


if __name__ == "__main__":
    main()
