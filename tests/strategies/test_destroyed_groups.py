"""A destroyed process group's gloo threads end at once, not in the interpreter's finalization (where a thread that
takes the GIL aborts the rank: SIGABRT after its work was done). Two and four launched ranks are checked at their
exit in tests/cli/test_launch.py and tests/cli/test_multi_node.py."""

import os

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

import framework
from framework.strategies.destroyed_groups import let_go_of_destroyed_groups
from tests.helpers import quiet_trainer
from tests.strategies.ddp_models import Regressor, regression_data
from tests.strategies.launched_run import thread_names

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="lists threads in /proc (Linux)")


def gloo_threads() -> int:
    return sum("gloo" in name for name in thread_names())


class _CountsThreads(framework.Callback):
    def on_train_end(self, trainer, pl_module):
        self.during = gloo_threads()


def test_a_sharded_fit_ends_with_its_gloo_threads_while_the_model_lives_on():
    if dist.is_initialized():  # an earlier one-process fit in this process left its group for the exit to end
        dist.destroy_process_group()
    before = gloo_threads()
    model, seen = Regressor(), _CountsThreads()
    trainer = quiet_trainer(max_steps=2, strategy="zero3", callbacks=[seen])
    trainer.fit(model, DataLoader(regression_data(), batch_size=8))
    trainer.strategy.end_process_group()  # what the exit does (Lightning's group too lives on after fit)
    # FSDP2 kept the group in the model's mesh infos, its DeviceMesh and DTensor's caches of meshes
    assert seen.during > before
    assert gloo_threads() <= before
    assert any(hasattr(parameter, "full_tensor") for parameter in model.parameters())  # sharded, and held here


def test_torch_distributed_defaults_bound_to_a_destroyed_group_become_the_default_group_and_others_stay():
    def in_torch(tensor, group=None):
        return tensor, group

    def users_own(tensor, group=None):
        return tensor, group

    in_torch.__module__ = "torch.distributed.optim.some_module"  # as if imported after the group started
    group = dist.ProcessGroup(dist.HashStore(), 0, 1)  # not registered in torch.distributed: as after a destroy
    in_torch.__defaults__ = users_own.__defaults__ = (group,)
    in_torch.__kwdefaults__ = {"kept": 1, "group": group}
    assert let_go_of_destroyed_groups() >= 2
    assert in_torch.__defaults__ == (None,) and in_torch.__kwdefaults__ == {"kept": 1, "group": None}
    assert users_own.__defaults__ == (group,)  # the user's objects are theirs
    assert in_torch(torch.ones(1))[1] is None


def test_groups_still_registered_are_kept():
    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        def in_torch(group=dist.group.WORLD):
            return group

        in_torch.__module__ = "torch.distributed.some_module"
        let_go_of_destroyed_groups()
        assert in_torch() is dist.group.WORLD
    finally:
        if started:
            dist.destroy_process_group()
