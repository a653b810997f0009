"""``accelerate.parallelism_config``'s name: Accelerate's N-D parallelism settings, which the framework does not
take; tensor parallelism with FSDP2 is ``framework.strategies.ModelParallelStrategy``."""

from framework.accelerate.utils.unsupported import refused_class

__all__ = ["ParallelismConfig"]

ParallelismConfig = refused_class(
    "ParallelismConfig", "the Accelerator takes no N-D parallelism config; for tensor parallelism with FSDP2 use "
    "framework.strategies.ModelParallelStrategy with the Trainer or the Runtime")
