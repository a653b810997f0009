"""A script for ``framework launch`` to start: each rank joins the gloo group torchrun's environment describes,
all-reduces rank + 1 (so 3 on two ranks only when both are in one group), and writes
``<out>/rank<N>.json`` with what it saw: its rank, the world size, the sum, its arguments and every
ACCELERATE_* / FSDP_* variable (plus OMP_NUM_THREADS and CUDA_VISIBLE_DEVICES).

    framework launch --num_processes 2 --cpu tests/cli/accelerate_env_probe.py OUT [ARGS ...]
"""

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    total = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(total)
    seen = {key: value for key, value in os.environ.items()
            if key.startswith(("ACCELERATE_", "FSDP_")) or key in ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")}
    record = {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "sum": total.item(),
              "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"]), "arguments": sys.argv[2:], "environment": seen}
    (out / f"rank{dist.get_rank()}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
