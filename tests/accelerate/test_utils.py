"""``framework.accelerate.utils`` and the modules beside it, used as Accelerate scripts use them: on one process
here, on two gloo ranks in test_distributed.py."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, TensorDataset

from framework.accelerate import Accelerator, init_empty_weights
from framework.accelerate.data_loader import (
    BatchSamplerShard,
    DataLoaderShard,
    IterableDatasetShard,
    prepare_data_loader,
)
from framework.accelerate.hooks import ModelHook, SequentialHook, add_hook_to_module, remove_hook_from_module
from framework.accelerate.state import AcceleratorState, GradientState, PartialState
from framework.accelerate.utils import (
    FullyShardedDataParallelPlugin,
    ProfileKwargs,
    calculate_maximum_sizes,
    clear_environment,
    compute_module_sizes,
    concatenate,
    convert_outputs_to_fp32,
    find_executable_batch_size,
    is_schedulefree_available,
    is_torch_version,
    listify,
    load_checkpoint_in_model,
    patch_environment,
    recursively_apply,
    send_to_device,
    write_basic_config,
)
from framework.errors import MisconfigurationError


def test_find_executable_batch_size_retries_smaller_after_running_out_of_memory():
    tried = []

    @find_executable_batch_size(starting_batch_size=64)
    def train(batch_size, scale):
        tried.append(batch_size)
        if batch_size > 40:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return batch_size * scale

    assert train(2) == 2 * 40 and tried == [64, 57, 51, 45, 40]  # 90% each time, as Accelerate
    with pytest.raises(TypeError, match="decorator passes it"):
        train(8, 2)

    @find_executable_batch_size(starting_batch_size=4)
    def broken(batch_size):
        raise ValueError("not memory")

    with pytest.raises(ValueError, match="not memory"):
        broken()


def test_environment_blocks_put_everything_back():
    os.environ.pop("MASTER_PORT_UNDER_TEST", None)
    with patch_environment(master_port_under_test=29501):
        assert os.environ["MASTER_PORT_UNDER_TEST"] == "29501"
        with clear_environment():
            assert "MASTER_PORT_UNDER_TEST" not in os.environ and "PATH" not in os.environ
        assert "PATH" in os.environ
    assert "MASTER_PORT_UNDER_TEST" not in os.environ


def test_nested_data_helpers_walk_lists_tuples_and_dicts():
    batch = {"x": torch.ones(2, dtype=torch.float16), "ids": [torch.tensor([1, 2])], "name": "a"}
    assert send_to_device(batch, "cpu", skip_keys="ids")["ids"][0] is batch["ids"][0]
    assert listify(batch)["ids"] == [[1, 2]]
    doubled = recursively_apply(lambda tensor: tensor * 2, batch)
    assert doubled["ids"][0].tolist() == [2, 4] and doubled["name"] == "a"
    with pytest.raises(TypeError, match="reached 'a'"):
        recursively_apply(lambda tensor: tensor, batch, error_on_other_type=True)
    joined = concatenate([{"x": torch.zeros(1, 2)}, {"x": torch.ones(2, 2)}])
    assert joined["x"].shape == (3, 2)
    half = convert_outputs_to_fp32(lambda: (torch.ones(1, dtype=torch.bfloat16), torch.ones(1, dtype=torch.int64)))
    assert [value.dtype for value in half()] == [torch.float32, torch.int64]
    assert is_torch_version(">=", "2.0") and isinstance(is_schedulefree_available(), bool)


def test_the_state_objects_describe_the_newest_accelerator():
    accelerator = Accelerator(cpu=True, mixed_precision="bf16", gradient_accumulation_steps=3)
    assert AcceleratorState().mixed_precision == "bf16" and accelerator.state.num_processes == 1
    assert GradientState() is accelerator.gradient_state and GradientState().num_steps == 3
    state = PartialState()
    assert (state.num_processes, state.process_index, state.is_main_process) == (1, 0, True)
    with state.split_between_processes([1, 2, 3]) as mine:
        assert mine == [1, 2, 3]


def test_a_loader_prepared_without_accelerator_calls_is_a_data_loader_shard():
    dataset = TensorDataset(torch.arange(10))
    loader = prepare_data_loader(DataLoader(dataset, batch_size=4), num_processes=2, process_index=1)
    assert isinstance(loader, DataLoaderShard)
    assert [batch[0].tolist() for batch in loader] == [[4, 5, 6, 7], [2, 3, 4, 5]]  # as Accelerate completes it
    built = DataLoaderShard(dataset, batch_size=5)
    assert isinstance(built, DataLoaderShard) and [batch[0].tolist() for batch in built] == [[0, 1, 2, 3, 4],
                                                                                             [5, 6, 7, 8, 9]]
    shard = BatchSamplerShard(BatchSampler(range(10), 3, False), num_processes=2, process_index=1)
    assert list(shard) == [[3, 4, 5], [9, 0, 1]] and len(shard) == 2
    stream = IterableDatasetShard(range(10), batch_size=3, num_processes=2, process_index=0)
    assert list(stream) == [0, 1, 2, 6, 7, 8] and len(stream) == 6


def test_empty_weights_take_no_memory_until_loaded_from_a_saved_model(tmp_path):
    with init_empty_weights():
        empty = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    assert all(parameter.is_meta for parameter in empty.parameters())
    assert not any(buffer.is_meta for buffer in empty.buffers())  # buffers only with include_buffers=True
    torch.manual_seed(0)
    real = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    accelerator = Accelerator(cpu=True)
    accelerator.save_model(real, tmp_path, max_shard_size=40, safe_serialization=False)  # several shards
    assert (tmp_path / "pytorch_model.bin.index.json").exists()
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    load_checkpoint_in_model(fresh, tmp_path, dtype="float64")
    for name, value in real.state_dict().items():
        loaded = fresh.state_dict()[name]
        assert torch.equal(loaded.to(value.dtype), value), name
    assert fresh[0].weight.dtype == torch.float64
    load_checkpoint_in_model(empty, tmp_path / "pytorch_model.bin.index.json")
    assert not any(parameter.is_meta for parameter in empty.parameters())
    assert torch.equal(empty[0].weight, real[0].weight) and empty[0].weight.requires_grad


def test_module_sizes_add_up_per_submodule():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Sequential(torch.nn.Linear(3, 2)))
    sizes = compute_module_sizes(model)
    assert sizes == {"": (15 + 8) * 4, "0": 15 * 4, "0.weight": 12 * 4, "0.bias": 3 * 4, "1": 8 * 4,
                     "1.0": 8 * 4, "1.0.weight": 6 * 4, "1.0.bias": 2 * 4}
    assert compute_module_sizes(model, dtype=torch.float16)[""] == (15 + 8) * 2
    assert calculate_maximum_sizes(model) == (92, (60, ["0"]))


def test_module_hooks_run_around_forward_and_come_off():
    class Add(ModelHook):
        def __init__(self, amount):
            self.amount = amount

        def pre_forward(self, module, *args, **kwargs):
            return (args[0] + self.amount,), kwargs

    class Double(ModelHook):
        def post_forward(self, module, output):
            return output * 2

    layer = torch.nn.Identity()
    add_hook_to_module(layer, SequentialHook(Add(1), Double()))
    assert layer(torch.tensor(1.0)).item() == 4.0
    add_hook_to_module(layer, Add(10))  # replaces the hook there
    assert layer(torch.tensor(1.0)).item() == 11.0
    remove_hook_from_module(layer)
    assert layer(torch.tensor(1.0)).item() == 1.0


def test_profile_writes_the_processes_trace(tmp_path):
    accelerator = Accelerator(cpu=True, kwargs_handlers=[ProfileKwargs(activities=["cpu"], record_shapes=True,
                                                                       output_trace_dir=str(tmp_path))])
    model = accelerator.prepare(torch.nn.Linear(4, 4))
    with accelerator.profile() as profiler:
        model(torch.ones(2, 4)).sum().backward()
    assert "aten::addmm" in profiler.key_averages().table()
    assert "aten::addmm" in (tmp_path / "profile_0.json").read_text()
    with pytest.raises(MisconfigurationError, match="accepted 'cpu' and 'cuda'"):
        ProfileKwargs(activities=["tpu"]).build()


def test_the_fsdp_plugin_takes_accelerates_fields_and_refuses_what_fsdp2_lacks(monkeypatch):
    from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig

    from framework.accelerate.settings import fsdp_options

    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, state_dict_config=FullStateDictConfig(offload_to_cpu=True),
                                            optim_state_dict_config=FullOptimStateDictConfig(),
                                            auto_wrap_policy="size_based_wrap", min_num_params=1000,
                                            use_orig_params=True, limit_all_gathers=True)
    options = fsdp_options(plugin)
    assert options["state_dict_type"] == "full" and options["sharding_strategy"] == "FULL_SHARD"
    assert options["auto_wrap_policy"].min_num_params == 1000
    monkeypatch.setenv("FSDP_RESHARD_AFTER_FORWARD", "false")  # a field left None takes the launcher's setting
    assert fsdp_options(FullyShardedDataParallelPlugin(fsdp_version=2))["sharding_strategy"] == "SHARD_GRAD_OP"
    with pytest.raises(MisconfigurationError, match="ignored_modules=...\\) is not supported"):
        fsdp_options(FullyShardedDataParallelPlugin(ignored_modules=[torch.nn.Linear(1, 1)]))
    with pytest.raises(MisconfigurationError, match="mixed_precision_policy"):
        fsdp_options(FullyShardedDataParallelPlugin(mixed_precision_policy="bf16"))


def test_write_basic_config_writes_once_for_this_machine(tmp_path):
    import yaml

    path = tmp_path / "default_config.yaml"
    assert write_basic_config(mixed_precision="bf16", save_location=path) == str(path)
    written = yaml.safe_load(path.read_text())
    assert (written["mixed_precision"], written["distributed_type"], written["use_cpu"]) == ("bf16", "NO", True)
    assert write_basic_config(save_location=path) is False
