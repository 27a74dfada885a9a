"""`attnlab series train`: argparse <-> `SeriesTrainConfig`, nothing else."""

from __future__ import annotations

import argparse
from typing import Any

from attnlab.core.clitools import add_device_arg, add_run_args, count, run_mode, threads

# flag -> SeriesTrainConfig field
FLAGS = {
    "arch": "arch",
    "layers": "n_layers",
    "heads": "n_heads",
    "d_model": "d_model",
    "d_mlp": "d_mlp",
    "seq_len": "seq_len",
    "batch": "batch",
    "lr": "lr",
    "steps": "steps",
    "save_every": "save_every",
    "vocab_chars": "vocab_chars",
    "triggers": "n_triggers",
    "corpus": "corpus",
    "device": "device",
}


def train_config(args: argparse.Namespace) -> Any:
    """From the flags; with --resume, the flags given as changes to the saved config (the run function reads it and
    refuses changes to fields a resumed run may not change)."""
    from attnlab.runs.resume import Resume
    from attnlab.series.config import SeriesTrainConfig

    values = {field: getattr(args, flag) for flag, field in FLAGS.items() if getattr(args, flag) is not None}
    if run_mode(args) != "resume":
        return SeriesTrainConfig(seed=args.seed, **values)
    return Resume(changes=values)


def cmd_train(args: argparse.Namespace) -> int:
    from attnlab.series.run import train_series

    config = train_config(args)
    with threads(args.threads):
        result = train_series(config, args.out, mode=run_mode(args))
    s = result.summary
    if s.get("nothing_to_do"):
        print(s["nothing_to_do"])
        return 0
    print(f"step {s['step']}: evaluation loss {s['final_eval_loss']:.3f}, {s['checkpoints']} checkpoints")
    print(f"run folder: {result.path}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `series` command group."""
    group = subparsers.add_parser(
        "series",
        help="train a small HF model on Bigram-Backcopy, saving a checkpoint series to scan",
        description="Checkpoint series made here (R25): `series train` saves a HF checkpoint every few steps "
        "into RUN/checkpoints/step_N; `attnlab scan --model RUN/checkpoints` scans them as a series.",
    )
    sub = group.add_subparsers(dest="series_command", metavar="SUBCOMMAND", required=True)
    p = sub.add_parser(
        "train",
        help="train a small GPT-2 or Llama on Bigram-Backcopy, saving HF checkpoints",
        description="Trains a small GPT-2 (or Llama) on Bigram-Backcopy sequences (<s> at position 0) with AdamW and "
        "saves checkpoints/step_N (HF folder + optimiser state) every --save-every steps; --resume continues "
        "bit-identically (one thread) from the latest one.",
    )
    p.add_argument("--arch", default=None, choices=["gpt2", "llama"], help="transformers model family (default gpt2)")
    p.add_argument("--layers", type=count, default=None, help="blocks (default 3)")
    p.add_argument("--heads", type=count, default=None, help="attention heads per block (default 1)")
    p.add_argument("--d-model", type=count, default=None, help="width (default 64)")
    p.add_argument("--d-mlp", type=count, default=None, help="MLP width (default 256)")
    p.add_argument("--seq-len", type=count, default=None, help="tokens per sequence, <s> included (default 64)")
    p.add_argument("--batch", type=count, default=None, help="sequences per step (default 32)")
    p.add_argument("--lr", type=float, default=None, help="AdamW learning rate (default 1e-3)")
    p.add_argument("--steps", type=count, default=None, help="updates (default 800; may grow on --resume)")
    p.add_argument("--save-every", type=count, default=None, help="steps between checkpoints (default 20)")
    p.add_argument("--vocab-chars", type=count, default=None, help="BB characters (default 64)")
    p.add_argument("--triggers", type=count, default=None, help="BB trigger characters (default 3)")
    p.add_argument("--corpus", default=None, help="UTF-8 text file for the BB statistics (default: pydoc topics)")
    add_device_arg(p, "float32 on any device (a resumed run keeps its own)", None)
    add_run_args(p, threads_default=1, resume=True)
    p.set_defaults(func=cmd_train, make_config=train_config)
