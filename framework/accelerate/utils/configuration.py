"""The configuration objects the ``Accelerator`` takes, with Accelerate's fields and defaults: where a project
writes (``ProjectConfiguration``), how loaders share batches (``DataLoaderConfiguration``), accumulation
(``GradientAccumulationPlugin``), FSDP (``FullyShardedDataParallelPlugin``) and compilation
(``TorchDynamoPlugin``)."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from framework.errors import MisconfigurationError, describe


@dataclass
class ProjectConfiguration:
    """Where a project's saved states and logs go (``Accelerator(project_config=...)``).

    :param project_dir: the project folder: automatically named states go under ``project_dir/checkpoints``, and
        the trackers write here unless ``logging_dir`` says otherwise; None (the default): the current folder
        for the states. ``Accelerator(project_dir=...)`` sets it too.
    :param logging_dir: the trackers' folder (TensorBoard writes in ``logging_dir/<project name>``, MLflow in
        ``logging_dir/mlruns``); None (the default): ``project_dir``.
    :param automatic_checkpoint_naming: True: ``save_state()`` without a folder writes
        ``project_dir/checkpoints/checkpoint_<iteration>``, and ``load_state()`` without one loads the newest
        complete state there; False (the default): both need a folder.
    :param total_limit: under automatic naming, how many of the newest complete states each ``save_state()``
        keeps (older ones are deleted); None (the default) or 0: all are kept.
    :param iteration: the number the next automatically named state takes; each such save adds one, and
        ``load_state()`` sets it to the number after the state it loaded. Default 0.
    :param save_on_each_node: accepted for Accelerate's sake; no effect: ``accelerator.save`` and the shared
        files of ``save_state`` are written by the main process only.
    """

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False

    def __post_init__(self) -> None:
        self.set_directories(self.project_dir)

    def set_directories(self, project_dir: str | None = None) -> None:
        """Set ``project_dir``, and ``logging_dir`` to it unless set already."""
        self.project_dir = project_dir
        if self.logging_dir is None:
            self.logging_dir = project_dir


@dataclass
class GradientAccumulationPlugin:
    """Gradient accumulation settings (``Accelerator(gradient_accumulation_plugin=...)``, in place of
    ``gradient_accumulation_steps``).

    :param num_steps: batches per optimizer step; None (the default): 1. The launcher's
        ``ACCELERATE_GRADIENT_ACCUMULATION_STEPS``, where set, wins.
    :param adjust_scheduler: True (the default): on the batches that do not end a window, a prepared scheduler
        counts the step in torch's ``_step_count`` only, which keeps torch's "scheduler stepped before the
        optimizer" warning quiet; the schedule itself moves only after an optimizer step either way.
    :param sync_with_dataloader: True (the default): the last batch of a prepared dataloader's pass always ends
        an accumulation window (the optimizer steps, and the next pass starts a new window); False: windows run
        on across passes.
    :param sync_each_batch: True: on several processes the gradients are all-reduced on every batch of a window,
        not only on its last (less memory, more communication; the optimizer still steps at the window's end);
        default False.
    """

    num_steps: int | None = None
    adjust_scheduler: bool = True
    sync_with_dataloader: bool = True
    sync_each_batch: bool = False


@dataclass
class DataLoaderConfiguration:
    """How prepared dataloaders share out their batches (``Accelerator(dataloader_config=...)``): batch ``i`` of
    a pass goes to process ``i mod N``.

    :param split_batches: only False (the default) is accepted: each process takes whole batches (divide the
        batch size by the number of processes instead).
    :param dispatch_batches: accepted for Accelerate's sake; no effect: every process loads its own batches (none
        are sent from the main process).
    :param even_batches: True (the default): the last round of batches is completed with samples from the pass's
        start, so every process runs as many batches (``gather_for_metrics`` drops the repeats); False: the
        processes past the end of the last round get one batch fewer, and a short last batch stays short.
    :param use_seedable_sampler: True: a shuffled DataLoader's pass ``e`` is ordered by the seed ``data_seed``
        plus ``e`` (``set_epoch`` chooses ``e``), as Accelerate's seedable sampler orders it; False (the
        default): the orders come from the loader's generator, else torch's, as Accelerate draws them.
    :param data_seed: the seed ``use_seedable_sampler`` orders passes by; None (the default): the main process's
        ``torch.initial_seed()``. Not read without ``use_seedable_sampler``.
    :param non_blocking: accepted for Accelerate's sake; no effect: prepared loaders' copies to a CUDA device are
        always non-blocking.
    :param use_stateful_dataloader: accepted for Accelerate's sake; no effect: ``save_state`` always saves a
        prepared loader's position in its pass.
    """

    split_batches: bool = False
    dispatch_batches: bool | None = None
    even_batches: bool = True
    use_seedable_sampler: bool = False
    data_seed: int | None = None
    non_blocking: bool = False
    use_stateful_dataloader: bool = False


@dataclass
class FullyShardedDataParallelPlugin:
    """FSDP settings, the fields of ``fsdp_config`` in Accelerate's config file; the framework runs them on FSDP2
    (``FSDPStrategy``). A field left None takes the launcher's ``FSDP_*`` setting, else Accelerate's default.
    The Accelerator reads the fields when it is made; changing them later has no effect.

    Example::

        plugin = FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
                                                transformer_cls_names_to_wrap=["Block"])
        accelerator = Accelerator(fsdp_plugin=plugin)

    :param fsdp_version: which of Accelerate's field sets says how to shard: 1 reads ``sharding_strategy``, 2
        reads ``reshard_after_forward``; both run on FSDP2. None (the default): ``FSDP_VERSION``, else 1.
    :param sharding_strategy: with ``fsdp_version=1``, a name or torch's ``ShardingStrategy``: FULL_SHARD
        (parameters, gradients and optimizer state sharded), SHARD_GRAD_OP (parameters stay gathered from
        forward to backward), HYBRID_SHARD or HYBRID_SHARD_ZERO2 (sharded within a node, replicated across
        nodes), NO_SHARD (plain DDP instead). None (the default): ``FSDP_SHARDING_STRATEGY``, else FULL_SHARD.
    :param reshard_after_forward: with ``fsdp_version=2``: True frees the gathered parameters after the forward
        (FULL_SHARD), False keeps them until the backward (SHARD_GRAD_OP); a bool or ``"true"``/``"false"``.
        None (the default): ``FSDP_RESHARD_AFTER_FORWARD``, else True.
    :param backward_prefetch: FSDP1's prefetch setting; accepted, no effect (FSDP2 has no such setting).
    :param mixed_precision_policy: only None (the default) is accepted: FSDP's dtypes follow
        ``Accelerator(mixed_precision=...)``.
    :param auto_wrap_policy: which submodules become units of their own: ``"transformer_based_wrap"`` (the
        classes ``transformer_cls_names_to_wrap`` names), ``"size_based_wrap"`` (submodules of at least
        ``min_num_params`` parameters), ``"no_wrap"`` (the whole model is one unit), or a callable taking a
        module and saying whether it is a unit. None (the default): ``FSDP_AUTO_WRAP_POLICY``, else the named
        classes where some are given, else ``FSDPStrategy``'s default (each block of a ``ModuleList`` or
        ``Sequential``, and any submodule of at least 1M parameters).
    :param cpu_offload: True (or torch's ``CPUOffload(offload_params=True)`` or ``CPUOffloadPolicy``): the
        sharded parameters, gradients and optimizer state live in CPU memory. None (the default):
        ``FSDP_OFFLOAD_PARAMS``, else False.
    :param ignored_modules: only None (the default) is accepted: the framework's FSDP2 leaves no module out of
        sharding.
    :param state_dict_type: how ``save_state`` writes the models and optimizers: ``"SHARDED_STATE_DICT"`` (each
        process writes its part) or ``"FULL_STATE_DICT"`` (the whole weights, gathered); ``"LOCAL_STATE_DICT"``
        counts as sharded; a name or torch's ``StateDictType``. None (the default): from
        ``state_dict_config``, else ``FSDP_STATE_DICT_TYPE``, else sharded.
    :param state_dict_config: read where ``state_dict_type`` is None: a ``torch.distributed.fsdp``
        ``FullStateDictConfig`` means full, another config sharded (its options are not read). Default None.
    :param optim_state_dict_config: accepted, no effect: the optimizer state is saved the way
        ``state_dict_type`` says for the model.
    :param limit_all_gathers: FSDP1's all-gather rate limit; accepted, no effect (FSDP2 has no such setting).
    :param use_orig_params: FSDP1's choice of flat or original parameters; accepted, no effect (FSDP2 keeps the
        original parameters).
    :param param_init_fn: only None (the default) is accepted: layers built on the meta device are initialised
        by their ``reset_parameters()``.
    :param sync_module_states: FSDP1's broadcast of rank 0's weights; accepted, no effect.
    :param forward_prefetch: FSDP1's forward prefetch; accepted, no effect (FSDP2 has no such setting).
    :param activation_checkpointing: True: the submodules the wrap policy makes units recompute their
        activations in the backward (less memory, more compute). None (the default):
        ``FSDP_ACTIVATION_CHECKPOINTING``, else False.
    :param activation_checkpointing_offload: only None or False (the default) is accepted: checkpointed
        activations are not offloaded to the CPU.
    :param cpu_ram_efficient_loading: accepted, no effect (``enable_fsdp_ram_efficient_loading()`` sets the
        variable Transformers reads).
    :param transformer_cls_names_to_wrap: the class names (a list, or a comma-separated string) of the layers
        that become units under ``"transformer_based_wrap"`` or no named policy; a name the model does not
        contain is an error at ``prepare``. None (the default): ``FSDP_TRANSFORMER_CLS_TO_WRAP``.
    :param min_num_params: under ``"size_based_wrap"``, the parameter count from which a submodule is a unit.
        None (the default): ``FSDP_MIN_NUM_PARAMS``, else 100,000,000.
    """

    fsdp_version: int | None = None
    sharding_strategy: Any = None
    reshard_after_forward: bool | str | None = None
    backward_prefetch: Any = None
    mixed_precision_policy: Any = None
    auto_wrap_policy: Callable[..., Any] | str | None = None
    cpu_offload: Any = None
    ignored_modules: Iterable[Any] | str | None = None
    state_dict_type: Any = None
    state_dict_config: Any = None
    optim_state_dict_config: Any = None
    limit_all_gathers: bool = True
    use_orig_params: bool | None = None
    param_init_fn: Callable[..., Any] | None = None
    sync_module_states: bool | None = None
    forward_prefetch: bool | None = None
    activation_checkpointing: bool | None = None
    activation_checkpointing_offload: bool | None = None
    cpu_ram_efficient_loading: bool | None = None
    transformer_cls_names_to_wrap: list[str] | None = None
    min_num_params: int | None = None

    def set_state_dict_type(self, state_dict_type: Any = None) -> None:
        """Set ``state_dict_type`` to ``"FULL_STATE_DICT"`` or ``"SHARDED_STATE_DICT"`` (and drop
        ``state_dict_config``); it counts only before the plugin is given to an Accelerator."""
        self.state_dict_type = state_dict_type
        self.state_dict_config = None

    def set_auto_wrap_policy(self, model: Any) -> None:
        """Check that the layer classes to wrap exist in ``model`` (a typo is said now, as Accelerate does).

        :raises MisconfigurationError: where a class named in ``transformer_cls_names_to_wrap`` is not in ``model``.
        """
        names = self.transformer_cls_names_to_wrap
        if isinstance(names, str):
            names = names.split(",")
        present = {type(module).__name__ for module in model.modules()}
        missing = sorted({name.strip() for name in names or []} - present)
        if missing:
            raise MisconfigurationError(f"FullyShardedDataParallelPlugin(transformer_cls_names_to_wrap=...) names "
                                        f"{missing}, which {type(model).__name__} does not contain.")

    def set_mixed_precision(self, mixed_precision: Any, buffer_autocast: bool = False, override: bool = False
                            ) -> None:
        """Accepted for Accelerate's sake: FSDP's dtypes follow ``Accelerator(mixed_precision=...)``."""

    def validate_mixed_precision_policy(self) -> None:
        """Refuse a mixed-precision policy of the plugin's own (the Accelerator's ``mixed_precision`` decides).

        :raises MisconfigurationError: where ``mixed_precision_policy`` is set.
        """
        if self.mixed_precision_policy is not None:
            raise MisconfigurationError(
                f"FullyShardedDataParallelPlugin(mixed_precision_policy={describe(self.mixed_precision_policy)}) is "
                "not supported: FSDP's dtypes follow Accelerator(mixed_precision='bf16' | 'fp16')."
            )


@dataclass
class TorchDynamoPlugin:
    """``torch.compile`` settings for the prepared models' forward (``Accelerator(dynamo_plugin=...)``). A field
    left None takes the launcher's ``ACCELERATE_DYNAMO_*`` setting where there is one.

    :param backend: a ``DynamoBackend`` or its name (any case), given to ``torch.compile`` in lower case;
        ``"no"``: not compiled. It wins over ``Accelerator(dynamo_backend=...)``; None (the default): that
        argument, else ``ACCELERATE_DYNAMO_BACKEND``, else not compiled.
    :param mode: ``torch.compile``'s mode (``"default"``, ``"reduce-overhead"``, ``"max-autotune"`` ...). None
        (the default): ``ACCELERATE_DYNAMO_MODE``, else torch's default.
    :param fullgraph: True: the whole forward must compile as one graph (a graph break is an error). None (the
        default): ``ACCELERATE_DYNAMO_USE_FULLGRAPH``, else False.
    :param dynamic: ``torch.compile``'s ``dynamic``: True compiles for varying shapes from the start, False never
        does. None (the default): True where ``ACCELERATE_DYNAMO_USE_DYNAMIC`` is set, else torch's default
        (dynamic once a shape changes).
    :param options: a dict of backend options for ``torch.compile(options=...)``; None (the default): none.
    :param disable: True: nothing is compiled, whatever the backend; default False.
    :param use_regional_compilation: only None (the default) or False is accepted: the framework compiles the
        whole forward; None with the launcher's ``ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION`` set is refused.
    """

    backend: Any = None
    mode: str | None = None
    fullgraph: bool | None = None
    dynamic: bool | None = None
    options: Any = None
    disable: bool = False
    use_regional_compilation: bool | None = None
