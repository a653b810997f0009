"""Accelerate's state objects: ``PartialState`` (which process this is, and code run on some processes),
``AcceleratorState`` (that and the run's settings) and ``GradientState`` (where accumulation stands).

Accelerate keeps these as process-wide singletons. Here they are views of this process's newest
``Accelerator``, which owns the state (``utils.shared_state``). Before any Accelerator exists,
``PartialState()`` joins the ranks a launcher started on a Runtime of its own, as Accelerate's does,
so a script that only splits work between processes needs no Accelerator.
"""

from typing import Any

from framework.accelerate.gradient_state import GradientState as _GradientState
from framework.accelerate.processes import ProcessControl
from framework.accelerate.utils.shared_state import current_accelerator, current_runtime
from framework.errors import MisconfigurationError


class PartialState(ProcessControl):
    """Which process this is, on which device, and code run on some processes only, without an ``Accelerator``:
    ``num_processes``, ``process_index``, ``is_main_process``, ``device``, ``wait_for_everyone()``,
    ``split_between_processes()``, ``main_process_first()``, ``on_main_process`` ...

    Example::

        state = PartialState()
        with state.split_between_processes(prompts) as mine:
            results = [generate(prompt) for prompt in mine]
    """

    def __init__(self, cpu: bool = False, **kwargs: Any) -> None:
        self._runtime = current_runtime(cpu)
        accelerator = current_accelerator()
        self.gradient_state = accelerator.gradient_state if accelerator is not None else _GradientState()

    @property
    def initialized(self) -> bool:
        """True: the state is set up when the object exists."""
        return True

    @property
    def backend(self) -> str | None:
        """The process group's backend (``"gloo"``, ``"nccl"``), or None on one process."""
        return getattr(self._runtime.strategy, "backend", None) if self.use_distributed else None

    @property
    def debug(self) -> bool:
        """False: Accelerate's collective-shape checks (``ACCELERATE_DEBUG_MODE``) are not made."""
        return False

    @property
    def fork_launched(self) -> bool:
        """False: ranks are launched by torchrun, ``framework launch`` or the Runtime."""
        return False

    def set_device(self) -> None:
        """Nothing to do: the Runtime put this process on its device."""

    def destroy_process_group(self, group: Any = None) -> None:
        """End the process group (a barrier first)."""
        self._runtime.strategy.end_process_group()

    def __repr__(self) -> str:
        return (f"Distributed environment: {self.distributed_type.value}\nNum processes: {self.num_processes}\n"
                f"Process index: {self.process_index}\nLocal process index: {self.local_process_index}\n"
                f"Device: {self.device}\n")


class AcceleratorState(PartialState):
    """``PartialState`` and the settings of this process's ``Accelerator``: ``mixed_precision``,
    ``distributed_type``, ``fsdp_plugin``, ``dynamo_plugin``, ``deepspeed_plugin``; ``megatron_lm_plugin`` is
    None (the framework does not run Megatron-LM). ``accelerator.state`` is one.

    Example::

        if AcceleratorState().mixed_precision == "bf16": ...

    :raises MisconfigurationError: where no Accelerator has been created.
    """

    def __init__(self, mixed_precision: str | None = None, cpu: bool = False, **kwargs: Any) -> None:
        accelerator = kwargs.pop("_accelerator", None) or current_accelerator()
        if accelerator is None:
            raise MisconfigurationError("AcceleratorState() describes an Accelerator: create the Accelerator first "
                                        "(PartialState() answers which process this is without one).")
        self.accelerator = accelerator
        self._runtime = accelerator._runtime
        self.gradient_state = accelerator.gradient_state

    @property
    def mixed_precision(self) -> str:
        """``"no"``, ``"fp16"``, ``"bf16"`` or a name ``register_precision`` added."""
        return self.accelerator.mixed_precision

    @property
    def fsdp_plugin(self) -> Any:
        """The FSDP plugin the Accelerator was given, or None."""
        return self.accelerator.fsdp_plugin

    @property
    def dynamo_plugin(self) -> Any:
        """The compile settings the Accelerator was given, or None."""
        return self.accelerator.dynamo_plugin

    @property
    def deepspeed_plugin(self) -> Any:
        """The Accelerator's ``DeepSpeedPlugin``, or None."""
        return self.accelerator.deepspeed_plugin

    @property
    def deepspeed_plugins(self) -> dict[str, Any] | None:
        """``{"default": the plugin}`` under DeepSpeed (one plugin per Accelerator here), else None."""
        plugin = self.accelerator.deepspeed_plugin
        return None if plugin is None else {"default": plugin}

    #: Always None: the framework does not run Megatron-LM (the Accelerator refuses a ``megatron_lm_plugin``).
    megatron_lm_plugin = None
    #: Always None: the Accelerator refuses a tensor-parallel plugin (the Trainer's tensor parallelism is
    #: ``framework.strategies.ModelParallelStrategy``).
    torch_tp_plugin = None
    #: Always None: the Accelerator refuses Accelerate's N-D ``parallelism_config``.
    parallelism_config = None
    #: Always False: Intel Extension for PyTorch is not used.
    use_ipex = False

    def get_deepspeed_plugin(self, name: str) -> Any:
        """The DeepSpeed plugin named ``name`` (the one plugin is ``"default"``).

        :raises MisconfigurationError: where ``name`` is not "default", or the Accelerator has no DeepSpeed plugin.
        """
        plugins = self.deepspeed_plugins or {}
        if name not in plugins:
            raise MisconfigurationError(f"AcceleratorState.get_deepspeed_plugin({name!r}): "
                                        + ("the one plugin here is 'default'." if plugins else
                                           "the Accelerator has no DeepSpeed plugin (deepspeed_plugin=...)."))
        return plugins[name]

    def select_deepspeed_plugin(self, name: str | None = None) -> None:
        """Select the plugin ``name``: the one plugin (``"default"``) is always selected."""
        self.get_deepspeed_plugin(name or "default")


class GradientState(_GradientState):
    """Where gradient accumulation stands (``sync_gradients``, ``end_of_dataloader``, ``remainder`` ...):
    ``GradientState()`` is the newest Accelerator's, as Accelerate's shared state is; without an Accelerator, a
    new one."""

    def __new__(cls, gradient_accumulation_plugin: Any = None) -> Any:
        accelerator = current_accelerator()
        if accelerator is not None:
            return accelerator.gradient_state
        return super().__new__(cls)

    def __init__(self, gradient_accumulation_plugin: Any = None) -> None:
        steps = getattr(gradient_accumulation_plugin, "num_steps", None) or 1
        super().__init__(num_steps=steps)
