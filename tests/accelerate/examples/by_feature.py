"""Accelerate's by-feature examples, each as a short training function in their style: the GLUE-style loop plus one
feature. ``--feature all`` runs every one in turn (each with an Accelerator of its own), on one process or on the
ranks ``framework launch`` started; each prints ``<feature>: <what it checks>``. Only the imports name
``framework.accelerate``.

    framework launch --num_processes 2 --cpu by_feature.py --feature local_sgd,early_stopping
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import tempfile

import torch
from tiny_glue import Accuracy, PairClassifier, Tokenizer, linear_schedule_with_warmup, sentence_pairs
from torch.utils.data import DataLoader

from framework.accelerate import Accelerator, DataLoaderConfiguration, DistributedType, FullyShardedDataParallelPlugin
from framework.accelerate.local_sgd import LocalSGD
from framework.accelerate.utils import (
    DDPCommunicationHookType,
    DistributedDataParallelKwargs,
    ProfileKwargs,
    find_executable_batch_size,
    set_seed,
)

EVAL_BATCH_SIZE = 12


def get_dataloaders(accelerator: Accelerator, batch_size: int = 16, train_count: int = 96, eval_count: int = 44
                    ) -> tuple[DataLoader, DataLoader]:
    tokenizer = Tokenizer()

    def collate_fn(examples):
        max_length = 128 if accelerator.distributed_type == DistributedType.XLA else None
        return tokenizer.pad(examples, max_length=max_length,
                             pad_to_multiple_of=8 if accelerator.mixed_precision != "no" else None)

    with accelerator.main_process_first():
        train, evaluation = sentence_pairs(train_count, seed=1), sentence_pairs(eval_count, seed=2)
    return (DataLoader(train, shuffle=True, collate_fn=collate_fn, batch_size=batch_size),
            DataLoader(evaluation, shuffle=False, collate_fn=collate_fn, batch_size=EVAL_BATCH_SIZE))


def evaluate(accelerator: Accelerator, model: torch.nn.Module, eval_dataloader: DataLoader) -> dict:
    model.eval()
    metric = Accuracy()
    for batch in eval_dataloader:
        batch.to(accelerator.device)
        with torch.no_grad():
            predictions = model(**batch).logits.argmax(dim=-1)
        predictions, references = accelerator.gather_for_metrics((predictions, batch["labels"]))
        metric.add_batch(predictions=predictions, references=references)
    return metric.compute()


def prepared(accelerator: Accelerator, batch_size: int = 16, lr: float = 5e-2, epochs: int = 2):
    train_dataloader, eval_dataloader = get_dataloaders(accelerator, batch_size)
    set_seed(42)
    model = PairClassifier().to(accelerator.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    scheduler = linear_schedule_with_warmup(optimizer, 2, len(train_dataloader) * epochs)
    return accelerator.prepare(model, optimizer, train_dataloader, eval_dataloader, scheduler)


def early_stopping(args: argparse.Namespace) -> None:
    accelerator = Accelerator(cpu=args.cpu)
    model, optimizer, train_dataloader, eval_dataloader, scheduler = prepared(accelerator)
    stopped_at = None
    for step, batch in enumerate(train_dataloader):
        batch.to(accelerator.device)
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if step == 1 and accelerator.is_main_process:  # the main process alone decides
            accelerator.set_trigger()
        if accelerator.check_trigger():
            stopped_at = step
            break
    accelerator.print(f"early_stopping: every process stopped after batch {stopped_at}")


def gradient_accumulation(args: argparse.Namespace) -> None:
    accelerator = Accelerator(cpu=args.cpu, gradient_accumulation_steps=2)
    model, optimizer, train_dataloader, eval_dataloader, scheduler = prepared(accelerator, epochs=3)
    syncs = 0
    for _ in range(3):
        model.train()
        for batch in train_dataloader:
            with accelerator.accumulate(model):
                batch.to(accelerator.device)
                accelerator.backward(model(**batch).loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                syncs += accelerator.sync_gradients
    accelerator.print(f"gradient_accumulation: {syncs} optimizer steps, accuracy "
                      f"{evaluate(accelerator, model, eval_dataloader)['accuracy']:.2f}")


def autoregressive(args: argparse.Namespace) -> None:
    """Accumulation written out by hand, normalised by the tokens of the whole window on every process."""
    accumulation = 2
    accelerator = Accelerator(cpu=args.cpu)
    model, optimizer, train_dataloader, eval_dataloader, scheduler = prepared(accelerator)
    updates = math.ceil(len(train_dataloader) / accumulation)
    remainder = len(train_dataloader) % accumulation or accumulation
    norms = []
    model.train()
    iterator = iter(train_dataloader)
    for update_step in range(updates):
        batch_samples = [next(iterator) for _ in range(accumulation if update_step != updates - 1 else remainder)]
        local_items = sum(batch["attention_mask"].sum() for batch in batch_samples)
        items = accelerator.gather(local_items).sum().item()
        for index, batch in enumerate(batch_samples):
            ctx = (model.no_sync if index < len(batch_samples) - 1 and accelerator.num_processes > 1
                   else contextlib.nullcontext)
            with ctx():
                loss = model(**batch).loss * batch["attention_mask"].sum() / items * accelerator.num_processes
                accelerator.backward(loss)
        norms.append(accelerator.clip_grad_norm_(model.parameters(), 1.0).item())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    accelerator.print(f"autoregressive: {len(norms)} updates, gradient norms finite: "
                      f"{all(math.isfinite(norm) for norm in norms)}")


def local_sgd(args: argparse.Namespace) -> None:
    accelerator = Accelerator(cpu=args.cpu)
    model, optimizer, train_dataloader, eval_dataloader, scheduler = prepared(accelerator)
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=2, enabled=True) as local:
        for batch in train_dataloader:
            batch.to(accelerator.device)
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            local.step()
    total = torch.stack([parameter.detach().sum() for parameter in model.parameters()]).sum()
    same = accelerator.gather(total.reshape(1)).unique().numel() == 1
    accelerator.print(f"local_sgd: weights equal on every process after the block: {same}")


def memory(args: argparse.Namespace) -> None:
    accelerator = Accelerator(cpu=args.cpu)

    @find_executable_batch_size(starting_batch_size=32)
    def inner_training_loop(batch_size: int) -> int:
        nonlocal accelerator
        accelerator.free_memory()
        if batch_size > 16:  # as if 32 did not fit
            raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB")
        model, optimizer, train_dataloader, eval_dataloader, scheduler = prepared(accelerator, batch_size)
        for batch in train_dataloader:
            batch.to(accelerator.device)
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            optimizer.zero_grad()
        return batch_size

    accelerator.print(f"memory: trained with batch size {inner_training_loop()}")


def multi_process_metrics(args: argparse.Namespace) -> None:
    """The hand-written form: gather, then cut the samples repeated to fill the last round."""
    accelerator = Accelerator(cpu=args.cpu)
    model, optimizer, train_dataloader, eval_dataloader, scheduler = prepared(accelerator)
    model.eval()
    samples_seen = 0
    references_seen = []
    for step, batch in enumerate(eval_dataloader):
        batch.to(accelerator.device)
        with torch.no_grad():
            predictions = model(**batch).logits.argmax(dim=-1)
        predictions, references = accelerator.gather((predictions, batch["labels"]))
        if accelerator.use_distributed:
            if step == len(eval_dataloader) - 1:
                references = references[: len(eval_dataloader.dataset) - samples_seen]
            else:
                samples_seen += references.shape[0]
        references_seen.append(references)
    accelerator.print(f"multi_process_metrics: {torch.cat(references_seen).numel()} samples counted once")


def profiler(args: argparse.Namespace) -> None:
    folder = tempfile.mkdtemp()
    accelerator = Accelerator(cpu=args.cpu, kwargs_handlers=[ProfileKwargs(activities=["cpu"], record_shapes=True,
                                                                           output_trace_dir=folder)])
    model, optimizer, train_dataloader, eval_dataloader, scheduler = prepared(accelerator)
    with accelerator.profile() as prof:
        for batch in train_dataloader:
            batch.to(accelerator.device)
            accelerator.backward(model(**batch).loss)
            break
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=5)
    written = os.path.exists(os.path.join(folder, f"profile_{accelerator.process_index}.json"))
    accelerator.print(f"profiler: table {'aten::' in table}, trace written {written}")


class ScheduleFreeSGD(torch.optim.SGD):
    """A stand-in for schedulefree's optimizers: they must be told when training and when evaluating."""

    def __init__(self, params, lr: float) -> None:
        super().__init__(params, lr=lr)
        self.training = True

    def train(self) -> None:
        self.training = True

    def eval(self) -> None:
        self.training = False

    def step(self, closure=None):
        assert self.training, "a schedule-free optimizer steps only in training mode"
        return super().step(closure)


def schedule_free(args: argparse.Namespace) -> None:
    accelerator = Accelerator(cpu=args.cpu)
    train_dataloader, eval_dataloader = get_dataloaders(accelerator)
    set_seed(42)
    model = PairClassifier()
    optimizer = ScheduleFreeSGD(model.parameters(), lr=0.5)
    model, optimizer, train_dataloader, eval_dataloader = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader)
    for _ in range(2):
        model.train()
        optimizer.train()
        for batch in train_dataloader:
            batch.to(accelerator.device)
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            optimizer.zero_grad()
        optimizer.eval()
        result = evaluate(accelerator, model, eval_dataloader)
    accelerator.print(f"schedule_free: evaluated {result['count']} samples in eval mode")


def ddp_comm_hook(args: argparse.Namespace) -> None:
    handler = DistributedDataParallelKwargs(comm_hook=DDPCommunicationHookType.FP16)
    accelerator = Accelerator(cpu=args.cpu, kwargs_handlers=[handler])
    model, optimizer, train_dataloader, eval_dataloader, scheduler = prepared(accelerator)
    for _ in range(2):
        model.train()
        for batch in train_dataloader:
            batch.to(accelerator.device)
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    accelerator.print(f"ddp_comm_hook: accuracy {evaluate(accelerator, model, eval_dataloader)['accuracy']:.2f}")


def cross_validation(args: argparse.Namespace) -> None:
    accelerator = Accelerator(cpu=args.cpu)
    rows = sentence_pairs(96, seed=1)
    tokenizer = Tokenizer()
    test_predictions = []
    for fold in range(3):
        valid = rows[fold::3]
        train = [row for index, row in enumerate(rows) if index % 3 != fold]
        train_dataloader = DataLoader(train, shuffle=True, collate_fn=tokenizer.pad, batch_size=16)
        eval_dataloader = DataLoader(valid, collate_fn=tokenizer.pad, batch_size=EVAL_BATCH_SIZE)
        test_dataloader = DataLoader(sentence_pairs(20, seed=3), collate_fn=tokenizer.pad, batch_size=EVAL_BATCH_SIZE)
        set_seed(42)
        model = PairClassifier()
        optimizer = torch.optim.AdamW(model.parameters(), lr=5e-2)
        model, optimizer, train_dataloader, eval_dataloader, test_dataloader = accelerator.prepare(
            model, optimizer, train_dataloader, eval_dataloader, test_dataloader)
        for batch in train_dataloader:
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            optimizer.zero_grad()
        evaluate(accelerator, model, eval_dataloader)
        fold_predictions = []
        for batch in test_dataloader:
            with torch.no_grad():
                logits = model(**batch).logits
            predictions, _ = accelerator.gather_for_metrics((logits, batch["labels"]))
            fold_predictions.append(predictions.cpu())
        test_predictions.append(torch.cat(fold_predictions, dim=0))
        accelerator.free_memory()
    preds = torch.stack(test_predictions, dim=0).sum(dim=0).div(3).argmax(dim=-1)
    accelerator.print(f"cross_validation: {len(test_predictions)} folds, {preds.numel()} test predictions")


def automatic_gradient_accumulation(args: argparse.Namespace) -> None:
    observed_batch_size = 32
    accelerator = Accelerator(cpu=args.cpu)

    @find_executable_batch_size(starting_batch_size=observed_batch_size)
    def inner_training_loop(batch_size: int) -> tuple[int, int]:
        nonlocal accelerator
        accelerator.gradient_accumulation_steps = observed_batch_size // batch_size
        accelerator.free_memory()
        if batch_size > 16:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 4GB")
        model, optimizer, train_dataloader, eval_dataloader, scheduler = prepared(accelerator, batch_size)
        steps = 0
        for batch in train_dataloader:
            with accelerator.accumulate(model):
                batch.to(accelerator.device)
                accelerator.backward(model(**batch).loss)
                optimizer.step()
                optimizer.zero_grad()
                steps += accelerator.sync_gradients
        return batch_size, steps

    batch_size, steps = inner_training_loop()
    accelerator.print(f"automatic_gradient_accumulation: batch {batch_size} x "
                      f"{accelerator.gradient_accumulation_steps}, {steps} optimizer steps")


def fsdp(args: argparse.Namespace) -> None:
    from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig

    plugin = FullyShardedDataParallelPlugin(
        state_dict_config=FullStateDictConfig(offload_to_cpu=False, rank0_only=False),
        optim_state_dict_config=FullOptimStateDictConfig(offload_to_cpu=False, rank0_only=False))
    accelerator = Accelerator(cpu=args.cpu, fsdp_plugin=plugin,
                              dataloader_config=DataLoaderConfiguration(even_batches=True))
    model, optimizer, train_dataloader, eval_dataloader, scheduler = prepared(accelerator)
    for batch in train_dataloader:
        batch.to(accelerator.device)
        accelerator.backward(model(**batch).loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    state = accelerator.get_state_dict(model)
    accelerator.print(f"fsdp: {accelerator.distributed_type.value}, whole state of {len(state)} tensors, accuracy "
                      f"{evaluate(accelerator, model, eval_dataloader)['accuracy']:.2f}")


FEATURES = {function.__name__: function for function in (
    early_stopping, gradient_accumulation, autoregressive, local_sgd, memory, multi_process_metrics, profiler,
    schedule_free, ddp_comm_hook, cross_validation, automatic_gradient_accumulation, fsdp)}


def main() -> None:
    parser = argparse.ArgumentParser(description="Accelerate's by-feature examples in their style.")
    parser.add_argument("--feature", default="all", help=f"'all' or some of {', '.join(FEATURES)}, comma-separated")
    parser.add_argument("--cpu", action="store_true", help="train on the CPU")
    args = parser.parse_args()
    for name in FEATURES if args.feature == "all" else args.feature.split(","):
        FEATURES[name](args)


if __name__ == "__main__":
    main()
