"""The Accelerate loop of ``loops.py`` as a script a launcher starts: each rank saves what it ended with.

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/accelerate/launched_loop.py OUT
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.accelerate.loops import accelerate_loop  # noqa: E402

if __name__ == "__main__":
    result = accelerate_loop(accumulate=2, shuffle=True, dropout=0.0)
    rank = int(__import__("os").environ.get("RANK", "0"))
    torch.save(result, Path(sys.argv[1]) / f"rank{rank}.pt")
