"""What ``FSDPStrategy`` saves and loads: the module's and the optimizer's state as each rank's parts or whole,
and checkpoints as a directory every rank writes its parts to, or as one file."""

from typing import Any

from torch import nn
from torch.optim import Optimizer

from framework.errors import MisconfigurationError, describe
from framework.strategies.base import _parameters_of
from framework.strategies.dtensors import placed_like, read_in_layout, same_shape, whole


class ShardedStateMethods:
    """``FSDPStrategy``'s state and checkpoint methods (it subclasses this); they read its ``state_dict_type``
    and use its ``unwrap``, ``broadcast_buffers`` and ``barrier``."""

    @property
    def saves_on_one_rank(self) -> bool:
        """False on several ranks: each rank holds only its part of the state."""
        return self.world_size == 1

    def module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        """The user's module's state: each rank's parts (DTensors), or with ``state_dict_type="full"`` whole.

        Every rank calls it: buffers are made rank 0's first.
        """
        if self.state_dict_type == "full":
            return self.full_module_state_dict(module)
        self.broadcast_buffers(module)
        return self.unwrap(module).state_dict()

    def full_module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        """The user's module's state with every tensor whole (every rank calls: the parts are gathered)."""
        self.broadcast_buffers(module)
        return {name: whole(value) for name, value in self.unwrap(module).state_dict().items()}

    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """``optimizer.state_dict()``: each rank's parts of the state, or whole with ``state_dict_type="full"``."""
        state = optimizer.state_dict()
        if self.state_dict_type == "sharded":
            return state
        from framework.nested import map_tensors

        return map_tensors(state, whole)

    def load_module_state(self, module: nn.Module, state_dict: dict[str, Any], strict: bool = True) -> Any:
        """Load ``state_dict`` (whole tensors, or parts laid out as saved) into the sharded module."""
        target = self.unwrap(module)
        current = target.state_dict()
        state_dict = read_in_layout(state_dict, current)
        placed = {name: placed_like(value, current.get(name)) for name, value in state_dict.items()}
        return target.load_state_dict(placed, strict=strict)

    def load_optimizer_state(self, optimizer: Optimizer, state: dict[str, Any]) -> None:
        """Load ``state`` into ``optimizer``, splitting whole tensors shaped like their parameter as it is split."""
        parameters = list(_parameters_of(optimizer))
        entries = state.get("state", {})
        saved = {(index, name): value for index, entry in entries.items() for name, value in entry.items()}
        saved = read_in_layout(saved, {key: parameters[key[0]] for key in saved if key[0] < len(parameters)})
        per_parameter: dict[Any, dict[str, Any]] = {index: {} for index in entries}
        for (index, name), value in saved.items():
            parameter = parameters[index] if index < len(parameters) else None
            keep = parameter is None or not same_shape(value, parameter)
            per_parameter[index][name] = value if keep else placed_like(value, parameter)
        optimizer.load_state_dict({**state, "state": per_parameter})

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str,
                        storage_options: dict[str, Any] | None = None) -> None:
        """A directory each rank writes its parts to (``"sharded"``), or one file from rank 0 (``"full"``).

        :raises MisconfigurationError: where ``storage_options`` are given for a sharded checkpoint.
        """
        if self.state_dict_type == "full":
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        from framework.io.checkpoint_dir import save_sharded

        if storage_options:
            raise MisconfigurationError(
                f"storage_options={describe(storage_options)}: sharded checkpoints are written through "
                "torch.distributed.checkpoint, which takes no storage options. Configure the filesystem through "
                "fsspec's configuration or environment, or use FSDPStrategy(state_dict_type='full')."
            )
        save_sharded(checkpoint, path, self.is_global_zero, lambda: self.barrier("save_checkpoint"))

    def load_checkpoint(self, path: str, weights_only: bool | None = None) -> dict[str, Any]:
        """Read a checkpoint. From a sharded directory the split tensors are read when loaded, each into the layout
        of the parameter (or optimizer state) it goes to, so each rank reads only its parts, whatever mesh (ZeRO,
        HSDP, tensor parallel) and number of ranks saved it; a file is read whole, through ``checkpoint_io``."""
        from framework.io.checkpoint_dir import is_sharded_checkpoint
        from framework.io.checkpoint_storage import load_checkpoint

        if not is_sharded_checkpoint(path):
            return super().load_checkpoint(path, weights_only)
        return load_checkpoint(path, map_location="cpu", weights_only=weights_only, leave_split_unread=True)

    @property
    def writes_own_checkpoints(self) -> bool:
        """Sharded checkpoints are directories every rank writes through ``torch.distributed.checkpoint``."""
        return self.state_dict_type == "sharded"
