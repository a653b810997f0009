"""Sentence-pair classification written as Accelerate's complete GLUE example is: checkpoints every epoch or every
N steps, resuming from one, experiment tracking, metrics gathered from every process. Only the imports name
``framework.accelerate``.

    python text_classification.py --checkpointing_steps epoch --output_dir runs
    framework launch --num_processes 2 --cpu text_classification.py --resume_from_checkpoint runs/epoch_0
"""

from __future__ import annotations

import argparse
import os

import torch
from tiny_glue import Accuracy, PairClassifier, Tokenizer, linear_schedule_with_warmup, sentence_pairs
from torch.utils.data import DataLoader

from framework.accelerate import Accelerator, DistributedType
from framework.accelerate.utils import set_seed

MAX_GPU_BATCH_SIZE = 16
EVAL_BATCH_SIZE = 12


def training_function(config: dict, args: argparse.Namespace) -> None:
    if args.with_tracking:
        accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision, log_with="all",
                                  project_dir=args.project_dir)
    else:
        accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    checkpointing_steps = None
    if args.checkpointing_steps is not None:
        checkpointing_steps = "epoch" if args.checkpointing_steps == "epoch" else int(args.checkpointing_steps)
    num_epochs, batch_size = config["num_epochs"], config["batch_size"]
    if args.with_tracking:
        accelerator.init_trackers(os.path.split(__file__)[-1].split(".")[0], config)
    tokenizer = Tokenizer()
    with accelerator.main_process_first():
        train_rows, eval_rows = sentence_pairs(96, seed=1), sentence_pairs(44, seed=2)

    gradient_accumulation_steps = 1
    if batch_size > MAX_GPU_BATCH_SIZE and accelerator.distributed_type != DistributedType.XLA:
        gradient_accumulation_steps = batch_size // MAX_GPU_BATCH_SIZE
        batch_size = MAX_GPU_BATCH_SIZE

    def collate_fn(examples):
        max_length = 128 if accelerator.distributed_type == DistributedType.XLA else None
        pad_to_multiple_of = 8 if accelerator.mixed_precision != "no" else None
        return tokenizer.pad(examples, max_length=max_length, pad_to_multiple_of=pad_to_multiple_of)

    train_dataloader = DataLoader(train_rows, shuffle=True, collate_fn=collate_fn, batch_size=batch_size)
    eval_dataloader = DataLoader(eval_rows, shuffle=False, collate_fn=collate_fn, batch_size=EVAL_BATCH_SIZE)
    set_seed(config["seed"])
    model = PairClassifier().to(accelerator.device)
    optimizer = torch.optim.AdamW(params=model.parameters(), lr=config["lr"])
    lr_scheduler = linear_schedule_with_warmup(optimizer, warmup=2, total=(len(train_dataloader) * num_epochs)
                                               // gradient_accumulation_steps)
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler)

    overall_step = 0
    starting_epoch = 0
    resume_step = None
    if args.resume_from_checkpoint:
        accelerator.print(f"Resumed from checkpoint: {args.resume_from_checkpoint}")
        accelerator.load_state(args.resume_from_checkpoint)
        training_difference = os.path.splitext(os.path.basename(args.resume_from_checkpoint))[0]
        if "epoch" in training_difference:
            starting_epoch = int(training_difference.replace("epoch_", "")) + 1
        else:
            resume_step = int(training_difference.replace("step_", ""))
            starting_epoch = resume_step // len(train_dataloader)
            resume_step -= starting_epoch * len(train_dataloader)

    for epoch in range(starting_epoch, num_epochs):
        model.train()
        total_loss = 0
        if args.resume_from_checkpoint and epoch == starting_epoch and resume_step is not None:
            active_dataloader = accelerator.skip_first_batches(train_dataloader, resume_step)
            overall_step += resume_step
        else:
            active_dataloader = train_dataloader
        for step, batch in enumerate(active_dataloader):
            batch.to(accelerator.device)
            outputs = model(**batch)
            loss = outputs.loss / gradient_accumulation_steps
            total_loss += loss.detach().float()
            accelerator.backward(loss)
            if step % gradient_accumulation_steps == 0:
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            overall_step += 1
            if isinstance(checkpointing_steps, int) and overall_step % checkpointing_steps == 0:
                accelerator.save_state(os.path.join(args.output_dir or ".", f"step_{overall_step}"))

        model.eval()
        metric = Accuracy()
        for batch in eval_dataloader:
            batch.to(accelerator.device)
            with torch.no_grad():
                outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            predictions, references = accelerator.gather_for_metrics((predictions, batch["labels"]))
            metric.add_batch(predictions=predictions, references=references)
        eval_metric = metric.compute()
        accelerator.print(f"epoch {epoch}:", eval_metric)
        if args.with_tracking:
            accelerator.log({"accuracy": eval_metric["accuracy"], "f1": eval_metric["f1"],
                             "train_loss": total_loss.item() / len(train_dataloader), "epoch": epoch}, step=epoch)
        if checkpointing_steps == "epoch":
            accelerator.save_state(os.path.join(args.output_dir or ".", f"epoch_{epoch}"))
    accelerator.print("weights:", round(sum(p.detach().double().sum().item() for p in model.parameters()), 6))
    accelerator.end_training()


def main() -> None:
    parser = argparse.ArgumentParser(description="Sentence-pair classification in Accelerate's example style.")
    parser.add_argument("--mixed_precision", type=str, default=None, choices=["no", "fp16", "bf16"])
    parser.add_argument("--cpu", action="store_true", help="train on the CPU")
    parser.add_argument("--checkpointing_steps", type=str, default=None, help="'epoch', or a number of batches")
    parser.add_argument("--resume_from_checkpoint", type=str, default=None)
    parser.add_argument("--with_tracking", action="store_true")
    parser.add_argument("--output_dir", type=str, default=None)
    parser.add_argument("--project_dir", type=str, default="logs")
    args = parser.parse_args()
    training_function({"lr": 5e-2, "num_epochs": 3, "seed": 42, "batch_size": 16}, args)


if __name__ == "__main__":
    main()
