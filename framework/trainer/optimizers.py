"""``configure_optimizers`` asked at fit's start (the forms it may return are parsed in
``framework.utilities.optimizer_config``), the optimizers ``self.optimizers()`` hands out, and LR scheduler
stepping."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from framework.errors import MisconfigurationError
from framework.hooks import Hook, overrides
from framework.module import Module
from framework.trainer.optimizer_proxy import OptimizerProxy
from framework.utilities.optimizer_config import check_schedulers, parse_optimizers

if TYPE_CHECKING:
    from framework.trainer.run import Run
    from framework.trainer.run_context import RunContext


def step_schedulers(run: Run, interval: str, plateau: bool | None) -> None:
    """Step the schedulers of ``interval`` that are due (``plateau``: only/no ReduceLROnPlateau; None: all).

    In manual optimization the user steps schedulers, as in Lightning.
    """
    if not run.module.automatic_optimization:
        return
    state = run.state
    scheduler_step = None
    count = state.global_step if interval == "step" else state.current_epoch + (0 if plateau else 1)
    for config in run.context.lr_scheduler_configs:
        if config.interval != interval or (plateau is not None and config.reduce_on_plateau != plateau):
            continue
        if count % config.frequency != 0:
            continue
        metric = None
        if config.reduce_on_plateau:
            metric = run.metrics.callback_view().get(config.monitor)
            if metric is None:
                if config.strict:
                    available = sorted(run.metrics.callback_view())
                    raise MisconfigurationError(
                        f"ReduceLROnPlateau monitors {config.monitor!r}, which was not logged. Logged metrics: "
                        f"{available}. Log it with self.log({config.monitor!r}, ...) or set 'strict': False."
                    )
                continue
        scheduler_step = scheduler_step or run.hooks.get(Hook.LR_SCHEDULER_STEP, with_default=True)
        scheduler_step(config.scheduler, metric)


def configure_optimizers(run: Run, context: RunContext, manual_step: Callable[..., bool]) -> None:
    """Ask the Module for its optimizers and schedulers, check them against how it optimizes, and put them in
    ``context`` set up by the runtime (with the proxies ``self.optimizers()`` hands a Module that steps them
    itself, whose ``step`` is ``manual_step``)."""
    module = run.module
    optimizers, context.lr_scheduler_configs = parse_optimizers(run.hooks.call(Hook.CONFIGURE_OPTIMIZERS))
    check_schedulers(context.lr_scheduler_configs, module.automatic_optimization,
                     steps_itself=overrides(module, Module, "lr_scheduler_step"))
    if module.automatic_optimization:
        if not optimizers:
            # Lightning trains on without updates here; the accepted forms above make it an error, which
            # also catches a configure_optimizers that forgot its return statement.
            raise MisconfigurationError(
                "configure_optimizers returned None: automatic optimization needs an optimizer. Return one "
                "from configure_optimizers, or set self.automatic_optimization = False to step (or not) "
                "yourself in training_step."
            )
        if len(optimizers) > 1:
            raise MisconfigurationError(
                f"configure_optimizers returned {len(optimizers)} optimizers. Several optimizers need manual "
                "optimization: set self.automatic_optimization = False and step them in training_step."
            )
    context.optimizers = [run.runtime.setup_optimizer(optimizer) for optimizer in optimizers]
    context.manual_optimizers = [OptimizerProxy(opt, manual_step) for opt in context.optimizers]
    context.has_step_schedulers = any(c.interval == "step" for c in context.lr_scheduler_configs)
