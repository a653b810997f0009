"""A script whose rank 1 ends with ``sys.exit(1)`` while rank 0 waits for it in ``wait_for_everyone()``: the run a
launcher must end within seconds, naming rank 1 (``test_launch``, ``tests/slurm``). Rank 1 writes the time it
leaves to ``OUT/leaving``.

    framework launch --num_processes 2 --cpu tests/cli/leaving_script.py OUT
"""

from __future__ import annotations

import os
import sys
import time

from framework.accelerate import Accelerator


def main(out: str) -> None:
    accelerator = Accelerator(cpu=True)
    accelerator.wait_for_everyone()
    if accelerator.process_index == 1:
        with open(os.path.join(out, "leaving"), "w") as stamp:
            stamp.write(repr(time.time()))
        sys.exit(1)
    accelerator.wait_for_everyone()  # never answered
    print("rank 0 was answered", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
