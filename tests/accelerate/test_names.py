"""Every name of Accelerate's documented package reference (and every name its examples import) exists under the
same module path in ``framework.accelerate``: working, or refusing with a clear error when used, never at import."""

from __future__ import annotations

import importlib

import pytest
import torch

from framework.accelerate import Accelerator, DistributedType
from framework.errors import MisconfigurationError

# Recorded from the reference pages of Accelerate 1.15's documentation (accelerator, state, kwargs handlers,
# DeepSpeed, FSDP, fp8 and Megatron-LM plugins, logging, trackers, torch wrappers, launchers, big modeling,
# inference, utilities) and the imports of its example scripts.
_REFERENCE = {
    "accelerate.test_utils.training": "mocked_dataloaders",
    "accelerate": (
        "Accelerator AutocastKwargs cpu_offload cpu_offload_with_hook DataLoaderConfiguration debug_launcher "
        "DeepSpeedPlugin disk_offload dispatch_model DistributedDataParallelKwargs DistributedType "
        "find_executable_batch_size FullyShardedDataParallelPlugin GradScalerKwargs infer_auto_device_map "
        "init_empty_weights InitProcessGroupKwargs load_checkpoint_and_dispatch load_checkpoint_in_model "
        "notebook_launcher PartialState prepare_pippy ProfileKwargs skip_first_batches synchronize_rng_states"
    ),
    "accelerate.big_modeling": (
        "attach_layerwise_casting_hooks cpu_offload disk_offload dispatch_model init_empty_weights "
        "load_checkpoint_and_dispatch load_checkpoint_in_model"
    ),
    "accelerate.commands.config.default": "write_basic_config",
    "accelerate.data_loader": (
        "BatchSamplerShard DataLoaderDispatcher DataLoaderShard IterableDatasetShard prepare_data_loader"
    ),
    "accelerate.hooks": (
        "add_hook_to_module AlignDevicesHook attach_align_device_hook attach_align_device_hook_on_blocks "
        "attach_execution_device_hook LayerwiseCastingHook ModelHook remove_hook_from_module "
        "remove_hook_from_submodules SequentialHook"
    ),
    "accelerate.inference": "prepare_pippy",
    "accelerate.local_sgd": "LocalSGD",
    "accelerate.logging": "get_logger",
    "accelerate.optimizer": "AcceleratedOptimizer",
    "accelerate.scheduler": "AcceleratedScheduler",
    "accelerate.state": "AcceleratorState GradientState PartialState",
    "accelerate.tracking": (
        "AimTracker ClearMLTracker CometMLTracker GeneralTracker MLflowTracker register_tracker_class "
        "SwanLabTracker TensorBoardTracker TrackioTracker WandBTracker"
    ),
    "accelerate.utils": (
        "AbstractTrainStep align_module_device apply_fp8_autowrap AutocastKwargs "
        "avg_losses_across_data_parallel_group BertTrainStep BnbQuantizationConfig broadcast "
        "broadcast_object_list calculate_maximum_sizes clear_environment compute_module_sizes "
        "ComputeEnvironment concatenate contextual_fp8_autocast convert_model convert_outputs_to_fp32 "
        "convert_to_fp32 DataLoaderConfiguration DDPCommunicationHookType DeepSpeedEngineWrapper "
        "DeepSpeedOptimizerWrapper DeepSpeedPlugin DeepSpeedSchedulerWrapper "
        "disable_fsdp_ram_efficient_loading DistributedDataParallelKwargs DistributedType DummyOptim "
        "DummyScheduler DynamoBackend enable_fsdp_ram_efficient_loading extract_model_from_parallel "
        "find_executable_batch_size FP8RecipeKwargs fsdp2_load_full_state_dict fsdp2_prepare_model "
        "fsdp2_switch_optimizer_parameters FullyShardedDataParallelPlugin gather gather_object "
        "get_active_deepspeed_plugin get_balanced_memory get_grad_scaler get_max_layer_size "
        "get_mixed_precision_context_manager get_module_children_bottom_up GPTTrainStep "
        "GradientAccumulationPlugin GradScalerKwargs has_offloaded_params has_transformer_engine_layers "
        "infer_auto_device_map InitProcessGroupKwargs install_xla is_bf16_available is_mps_available "
        "is_npu_available is_schedulefree_available is_torch_version is_torch_xla_available is_xpu_available "
        "KwargsHandler listify load load_and_quantize_model load_checkpoint_in_model load_offloaded_weights "
        "load_state_dict LoggerType MegatronLMDummyDataLoader MegatronLMDummyScheduler MegatronLMPlugin "
        "merge_fsdp_weights MODEL_NAME offload_state_dict OPTIMIZER_NAME pad_across_processes "
        "patch_environment PrecisionType ProfileKwargs ProjectConfiguration purge_accelerate_environment "
        "recursively_apply reduce retie_parameters RNG_STATE_NAME RNGType SAFE_WEIGHTS_INDEX_NAME "
        "SAFE_WEIGHTS_NAME SageMakerDistributedType save SCALER_NAME SCHEDULER_NAME send_to_device "
        "set_module_tensor_to_device set_numa_affinity set_seed slice_tensors synchronize_rng_state "
        "synchronize_rng_states T5TrainStep TorchDynamoPlugin wait_for_everyone WEIGHTS_INDEX_NAME "
        "WEIGHTS_NAME write_basic_config"
    ),
    "accelerate.utils.environment": "override_numa_affinity",
    "accelerate.utils.fsdp_utils": "fsdp2_prepare_auto_wrap_policy",
}



@pytest.mark.parametrize("module", sorted(_REFERENCE))
def test_each_documented_name_is_there_under_the_same_module_path(module):
    ours = importlib.import_module(module.replace("accelerate", "framework.accelerate", 1))
    missing = [name for name in _REFERENCE[module].split() if not hasattr(ours, name)]
    assert missing == []


def test_distributed_type_has_accelerates_members_so_scripts_can_compare():
    assert [member.value for member in DistributedType] == [
        "NO", "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA", "MULTI_XPU", "DEEPSPEED",
        "FSDP", "XLA", "MEGATRON_LM", "MULTI_HPU", "MULTI_NEURON"]
    accelerator = Accelerator(cpu=True)
    assert accelerator.distributed_type != DistributedType.XLA and accelerator.distributed_type == "NO"
    assert str(accelerator.distributed_type) == "DistributedType.NO"  # as Accelerate prints it


def _model() -> torch.nn.Module:
    return torch.nn.Linear(2, 2)


@pytest.mark.parametrize(("module", "call"), [
    ("utils", lambda u: u.MegatronLMPlugin()),
    ("utils", lambda u: u.BnbQuantizationConfig(load_in_8bit=True)),
    ("utils", lambda u: u.infer_auto_device_map(_model())),
    ("utils", lambda u: u.convert_model(_model())),
    ("utils", lambda u: u.install_xla()),
    ("utils", lambda u: u.set_numa_affinity(0)),
    ("big_modeling", lambda m: m.cpu_offload(_model())),
    ("big_modeling", lambda m: m.load_checkpoint_and_dispatch(_model(), "weights")),
    ("inference", lambda m: m.prepare_pippy(_model())),
    ("parallelism_config", lambda m: m.ParallelismConfig()),
    ("data_loader", lambda m: m.DataLoaderDispatcher([1, 2])),
    ("test_utils.training", lambda m: m.mocked_dataloaders(None)),
    ("tracking", lambda m: m.AimTracker("run")),
    ("hooks", lambda m: m.AlignDevicesHook()),
])
def test_what_the_framework_does_not_run_imports_and_refuses_when_used(module, call):
    with pytest.raises(MisconfigurationError, match="is not supported: "):
        call(importlib.import_module(f"framework.accelerate.{module}"))


def test_the_accelerator_refuses_fp8_and_methods_of_engines_it_does_not_run():
    from framework.accelerate.utils import FP8RecipeKwargs

    with pytest.raises(MisconfigurationError, match="does not train in fp8"):
        Accelerator(cpu=True, kwargs_handlers=[FP8RecipeKwargs(backend="te")])
    accelerator = Accelerator(cpu=True)
    with pytest.raises(MisconfigurationError, match="lomo_backward"):
        accelerator.lomo_backward(torch.tensor(1.0), 0.1)
    assert accelerator.state.deepspeed_plugin is None
    assert not accelerator.verify_device_map(_model())
