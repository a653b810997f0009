"""A forecasting library written for Lightning (the shape of those on PyPI): its modules import Lightning's names,
subclass its plugins and LightningModule, and build their own Trainer. The suite runs it, unchanged, under
``framework as-lightning``; nothing here imports framework."""

from tsforecast.model import Forecaster, SeasonalData
from tsforecast.training import fit_forecaster

__all__ = ["Forecaster", "SeasonalData", "fit_forecaster"]
