"""What ``Trainer(plugins=[...])`` and ``Runtime(plugins=[...])`` take, under Lightning's names
(``lightning.pytorch.plugins``): one checkpoint IO, one precision, one cluster environment.

- checkpoint IO: ``TorchCheckpointIO`` (the default), ``AsyncCheckpointIO``, or a ``CheckpointIO`` subclass;
- precision: ``Precision``, ``MixedPrecision``, ``HalfPrecision``, ``DoublePrecision`` (or the ``precision=``
  argument, not both);
- cluster environment: ``LightningEnvironment``, ``SLURMEnvironment``, ``TorchElasticEnvironment``, or a
  ``ClusterEnvironment`` subclass.

Example::

    from framework.plugins import AsyncCheckpointIO, SLURMEnvironment   # was: from lightning.pytorch.plugins ...
    Trainer(plugins=[AsyncCheckpointIO(), SLURMEnvironment(auto_requeue=False)])
"""

from framework.io.async_writer import AsyncCheckpointIO
from framework.io.checkpoint_io import CheckpointIO, TorchCheckpointIO
from framework.plugins.environments import (
    ClusterEnvironment,
    LightningEnvironment,
    SLURMEnvironment,
    TorchElasticEnvironment,
)
from framework.plugins.precision import BitsandbytesPrecision, DoublePrecision, HalfPrecision, MixedPrecision, Precision

__all__ = ["AsyncCheckpointIO", "BitsandbytesPrecision", "CheckpointIO", "ClusterEnvironment", "DoublePrecision",
           "HalfPrecision", "LightningEnvironment", "MixedPrecision", "Precision", "SLURMEnvironment",
           "TorchCheckpointIO", "TorchElasticEnvironment"]
