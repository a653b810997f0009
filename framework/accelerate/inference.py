"""``accelerate.inference``'s name: pipeline-parallel inference, which the framework does not run."""

from framework.accelerate.utils.unsupported import refused_function

__all__ = ["prepare_pippy"]

prepare_pippy = refused_function(
    "prepare_pippy", "the framework does not split a model into pipeline stages for inference; use Accelerate "
    "itself for pipeline-parallel inference")
