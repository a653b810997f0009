"""``framework consolidate CKPT_DIR OUT_FILE``: a sharded (zero2/zero3) or DeepSpeed checkpoint as one file."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def consolidate_command(argv: Sequence[str]) -> int:
    """Write the checkpoint directory ``argv[0]`` as the single file ``argv[1]``; the exit code."""
    parser = argparse.ArgumentParser(
        prog="framework consolidate",
        description="Write a checkpoint directory (a zero2/zero3 run's, or a DeepSpeed run's) as one file that "
                    "torch.load(weights_only=True) and Module.load_from_checkpoint read on one process. DeepSpeed's "
                    "optimizer state does not carry over: its file holds the whole fp32 weights.",
    )
    parser.add_argument("checkpoint_dir", help="the checkpoint directory, e.g. checkpoints/last.ckpt")
    parser.add_argument("output_file", help="the file to write (any fsspec path)")
    options = parser.parse_args(list(argv))
    import os

    from framework.errors import CheckpointError
    from framework.io.checkpoint_dir import consolidate
    from framework.io.deepspeed_dir import is_deepspeed_checkpoint
    from framework.io.fs import is_dir

    if is_dir(options.output_file):
        print(f"framework consolidate: {options.output_file!r} is a directory; name the file to write, e.g. "
              f"{os.path.join(options.output_file, 'consolidated.ckpt')!r}.", file=sys.stderr)
        return 1
    try:
        if is_deepspeed_checkpoint(options.checkpoint_dir):
            from framework.strategies.deepspeed_checkpoint import consolidate_deepspeed

            consolidate_deepspeed(options.checkpoint_dir, options.output_file)
        else:
            consolidate(options.checkpoint_dir, options.output_file)
    except (CheckpointError, FileNotFoundError) as error:
        print(f"framework consolidate: {error}", file=sys.stderr)
        return 1
    print(f"Wrote {options.output_file}")
    return 0
