"""One training loop written three ways: for the Accelerator, for the Runtime, and as plain PyTorch; shared by the
Accelerator's tests (functions at the top level, so started ranks can import them)."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

import framework
from framework.accelerate import Accelerator

FEATURES = 4


def data(count: int = 64, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, FEATURES, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True).sin())


def model_and_optimizer(seed: int = 0, dropout: float = 0.1, adamw: bool = False
                        ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A small MLP with momentum SGD (or AdamW, which DeepSpeed's ZeRO takes without being told to), so any
    difference in the gradients shows in the weights; dropout, so the random state matters too."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.Tanh(), torch.nn.Dropout(dropout),
                                torch.nn.Linear(8, 1))
    if adamw:
        return model, torch.optim.AdamW(model.parameters(), lr=0.01)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().cpu().clone() for name, value in model.state_dict().items()}


def accelerate_loop(accumulate: int = 2, epochs: int = 2, shuffle: bool = True, count: int = 64,
                    batch_size: int = 4, dropout: float = 0.1, **options) -> dict:
    """The loop as an Accelerate user writes it; returns the final weights and what each batch saw."""
    model, optimizer = model_and_optimizer(dropout=dropout)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=accumulate, **options)
    loader = DataLoader(data(count), batch_size=batch_size, shuffle=shuffle)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    syncs = []
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                syncs.append(accelerator.sync_gradients)
                optimizer.step()
                optimizer.zero_grad()
    return {"weights": {name: value.clone() for name, value in accelerator.get_state_dict(model).items()},
            "syncs": syncs, "batches": len(loader), "distributed_type": accelerator.distributed_type.value}


def runtime_loop(accumulate: int = 2, epochs: int = 2, shuffle: bool = True, count: int = 64,
                 batch_size: int = 4, dropout: float = 0.1) -> dict:
    """The same loop on the Runtime (Fabric's way): accumulation written out by hand."""
    model, optimizer = model_and_optimizer(dropout=dropout)
    runtime = framework.Runtime(accelerator="cpu")
    model, optimizer = runtime.setup(model, optimizer)
    loader = runtime.setup_dataloaders(DataLoader(data(count), batch_size=batch_size, shuffle=shuffle))
    for _ in range(epochs):
        model.train()
        for index, (x, y) in enumerate(loader, start=1):
            stepping = index % accumulate == 0 or index == len(loader)
            with runtime.no_backward_sync(model, enabled=not stepping):
                runtime.backward(torch.nn.functional.mse_loss(model(x), y) / accumulate)
            if stepping:
                optimizer.step()
                optimizer.zero_grad()
    return {"weights": weights(model.module)}


def plain_loop_in_accelerates_order(accumulate: int = 2, epochs: int = 2, count: int = 64, batch_size: int = 4,
                                    world_size: int = 2, adamw: bool = False) -> dict:
    """What ``world_size`` ranks of ``accelerate_loop`` (without dropout) compute, as one plain process: Accelerate
    shuffles from a generator the ranks share, seeded when the loader is prepared, and deals batch ``i`` of a pass
    to rank ``i mod world_size``, so each step averages the gradients of ``world_size`` consecutive batches."""
    model, optimizer = model_and_optimizer(dropout=0.0, adamw=adamw)
    generator = torch.Generator().manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
    x, y = data(count).tensors
    for _ in range(epochs):
        order = torch.randperm(count, generator=generator)
        torch.randperm(count, generator=generator)  # RandomSampler draws once more at a pass's end
        rounds = order.reshape(-1, world_size * batch_size)
        for index, samples in enumerate(rounds, start=1):
            loss = torch.nn.functional.mse_loss(model(x[samples]), y[samples])
            (loss / accumulate).backward()
            if index % accumulate == 0 or index == len(rounds):
                optimizer.step()
                optimizer.zero_grad()
    return {"weights": weights(model)}


# On several ranks the loops put a pass's samples on other ranks (Accelerate deals whole batches, the Runtime
# every N-th sample): the same samples make each step, but each rank draws the same dropout masks for other rows.
def accelerate_loop_on_rank(rank: int, accumulate: int, shuffle: bool) -> dict:
    return accelerate_loop(accumulate=accumulate, shuffle=shuffle, dropout=0.0)


def runtime_loop_on_rank(rank: int, accumulate: int, shuffle: bool) -> dict:
    return runtime_loop(accumulate=accumulate, shuffle=shuffle, dropout=0.0)
