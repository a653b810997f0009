"""A Trainer script for ``framework launch --max-restarts N`` in which rank 1 gets stuck at step 3 of each of the
first attempts, so the other rank's collective times out (``DDPStrategy(timeout=5)``); the attempt after them trains
to the end and rank 0 prints ``done <global_step>``. ``stuck_rank.py stop loop``: in attempt 0 rank 1 stops
(SIGSTOP), in attempt 1 it goes into an endless loop. Rank 1 prints ``stuck <attempt> <time>`` as it gets stuck and
rank 0 ``started <attempt> <time>`` once torch and the framework are imported, so a test can time each restart."""

from __future__ import annotations

import os
import signal
import sys
import time

import torch
from torch import nn

import framework
from framework.strategies import DDPStrategy

ATTEMPT = int(os.environ["FRAMEWORK_RESTART_COUNT"])


class Stopping(framework.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        if self.global_rank == 1 and self.global_step == 3 and ATTEMPT < len(sys.argv) - 1:
            print(f"stuck {ATTEMPT} {time.time()}", flush=True)
            if sys.argv[1 + ATTEMPT] == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)
            while True:
                pass
        return self.layer(batch).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    if os.environ["RANK"] == "0":
        print(f"started {ATTEMPT} {time.time()}", flush=True)
    trainer = framework.Trainer(max_epochs=1, accelerator="cpu", devices=2, strategy=DDPStrategy(timeout=5),
                                logger=False, enable_progress_bar=False, enable_checkpointing=False,
                                enable_model_summary=False)
    trainer.fit(Stopping(), torch.utils.data.DataLoader(torch.randn(40, 2), batch_size=4))
    if trainer.is_global_zero:
        print("done", trainer.global_step)
