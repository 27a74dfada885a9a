"""`attnlab bb {sample,train,intervene,theory,compare}`: argparse <-> config, nothing else."""

from __future__ import annotations

import argparse
from pathlib import Path

from attnlab.bb import config as C
from attnlab.core.clitools import add_device_arg, add_run_args, count, run_mode, threads
from attnlab.runs.resume import Resume

# `bb train` flag -> TrainConfig field
TRAIN_FLAGS = {
    "layers": "n_layers",
    "heads": "n_heads",
    "attention": "attention",
    "optimizer": "optimizer",
    "lr": "lr",
    "steps": "steps",
    "seed": "seed",
    "d_model": "d_model",
    "d_mlp": "d_mlp",
    "seq_len": "seq_len",
    "batch": "batch",
    "eval_batch": "eval_batch",
    "no_attn": "no_attn",
    "no_mlp": "no_mlp",
    "linear_mlp": "linear_mlp",
    "block": "block",
    "ckpt_every": "ckpt_every",
    "corpus": "corpus",
    "vocab_chars": "vocab_chars",
    "triggers": "n_triggers",
    "log": "log",
    "device": "device",
    "precision": "precision",
}


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated layer indices, got {text!r}") from None


def register(sub: argparse._SubParsersAction) -> None:
    bb = sub.add_parser(
        "bb",
        help="Bigram-Backcopy study: data, toy training, interventions, theory",
        description="Extreme-token phenomena (attention sinks, value-state drains, residual-state "
        "peaks) on the Bigram-Backcopy task.",
    )
    cmds = bb.add_subparsers(dest="bb_command", metavar="SUBCOMMAND")
    _register_sample(cmds)
    _register_train(cmds)
    p = cmds.add_parser(
        "intervene",
        help="risks of a trained model with heads/MLPs/layers zeroed",
        description="Zero each head, MLP and layer and force attention onto <s>; writes "
        "interventions.json and report.html into a new run folder.",
    )
    p.add_argument("run_dir", help="a folder written by `attnlab bb train`")
    add_device_arg(
        p,
        "the forward passes run there in float32 (the attention statistics reduced there in float64); the risks "
        "are computed on the cpu",
    )
    add_run_args(p, seed=False)
    p.set_defaults(func=cmd_intervene, make_config=intervene_config)
    _register_subspace(cmds)
    p = cmds.add_parser(
        "theory",
        help="simulate the mutual-reinforcement and Adam-vs-SGD models",
        description="Gradient flow on (α, β) of the simplified loss and the scalar residual-norm "
        "model under Adam and SGD; figures and fitted slopes.",
    )
    p.add_argument("--t-max", type=float, default=1e9, help="integration horizon (default 1e9)")
    add_run_args(p)
    p.set_defaults(func=cmd_theory, make_config=theory_config)
    p = cmds.add_parser(
        "compare",
        help="overlay metrics of several BB runs (e.g. softmax vs ReLU, Adam vs SGD)",
        description="One figure per group of metrics with one line per run.",
    )
    p.add_argument("run_dirs", nargs="+", help="folders written by `attnlab bb train`")
    p.add_argument("--layer", type=int, default=0, help="layer whose metrics are compared (default 0)")
    add_run_args(p, seed=False)
    p.set_defaults(func=cmd_compare, make_config=compare_config)
    bb.set_defaults(func=lambda args: (bb.print_help(), 1)[1])


def _register_subspace(cmds: argparse._SubParsersAction) -> None:
    p = cmds.add_parser(
        "subspace",
        help="principal angles between the attention and MLP output subspaces (R19)",
        description="Span the attention outputs and the MLP outputs of one layer over the evaluation batch (top-k "
        "singular subspaces, k by energy), report their principal angles and the fraction of the attention "
        "output's energy inside the MLP subspace; writes subspace.json, a figure and report.html in a new folder.",
    )
    p.add_argument("run_dir", help="a folder written by `attnlab bb train`")
    p.add_argument("--layer", type=int, default=0, help="layer whose outputs are compared (default 0)")
    p.add_argument("--energy", type=float, default=0.95, help="energy kept by each subspace (default 0.95)")
    add_run_args(p, seed=False)
    p.set_defaults(func=cmd_subspace, make_config=subspace_config)


def _task_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", default=None, help="UTF-8 text file (default: CPython's pydoc_data topics)")
    p.add_argument("--vocab-chars", type=count, default=None, help="characters kept (default 64; 0 keeps all)")
    p.add_argument("--triggers", type=count, default=None, help="k most frequent characters used as triggers (3)")


def _register_sample(cmds: argparse._SubParsersAction) -> None:
    p = cmds.add_parser(
        "sample",
        help="write BB sequences, the bigram matrix and the vocabulary",
        description="Sample N BB sequences and write sequences.npy (int64 [N, T+1]), bigram.npy "
        "(float64 [V, V]) and meta.json (vocabulary, trigger ids, bos id).",
    )
    p.add_argument("--n", type=count, default=512, help="number of sequences (default 512)")
    p.add_argument("--seq-len", type=count, default=256, help="T: each sequence has T+1 tokens (default 256)")
    _task_args(p)
    add_run_args(p)
    p.set_defaults(func=cmd_sample, make_config=sample_config)


def _register_train(cmds: argparse._SubParsersAction) -> None:
    p = cmds.add_parser(
        "train",
        help="train a toy transformer on BB and record the phenomena",
        description="Train a small pre-LN transformer on BB; metrics on a log-spaced schedule go to "
        "metrics.jsonl, checkpoints (safetensors + JSON) to checkpoints/, figures and "
        "report.html at the end. Ctrl-C or SIGTERM saves a checkpoint; --resume "
        "continues (only --steps and --ckpt-every may change).",
    )
    p.add_argument("--preset", default=None, help="cpu (default; minutes on 2 cores) or paper (the paper's sizes)")
    p.add_argument("--layers", type=count, default=None, help="number of layers (default 1)")
    p.add_argument("--heads", type=count, default=None, help="heads per layer (default 1)")
    p.add_argument("--attention", choices=C.ATTENTION_KINDS, default=None, help="attention kind (default softmax)")
    p.add_argument("--optimizer", choices=C.OPTIMIZERS, default=None, help="AdamW or SGD with momentum 0.9")
    p.add_argument(
        "--lr",
        type=float,
        default=None,
        help="learning rate (default: adam 1e-3 cpu / 3e-4 paper, relu 3e-3, sgd 0.03)",
    )
    p.add_argument("--steps", type=count, default=None, help="optimiser steps (default: the preset's)")
    p.add_argument("--seed", type=int, default=None, help="random seed for init and training batches (default 0)")
    p.add_argument("--d-model", type=count, default=None, help="residual width (preset default)")
    p.add_argument("--d-mlp", type=count, default=None, help="MLP width (preset default)")
    p.add_argument("--seq-len", type=count, default=None, help="T, also the number of learned positions")
    p.add_argument("--batch", type=count, default=None, help="training batch size")
    p.add_argument("--eval-batch", type=count, default=None, help="size of the fixed evaluation batch")
    p.add_argument("--no-attn", type=_int_list, default=None, metavar="L,..", help="layers without attention")
    p.add_argument("--no-mlp", type=_int_list, default=None, metavar="L,..", help="layers without MLP")
    p.add_argument("--linear-mlp", type=_int_list, default=None, metavar="L,..", help="layers with a linear MLP")
    p.add_argument(
        "--block",
        choices=C.BLOCKS,
        default=None,
        help="sequential (default: x += Attn(LN x); x += MLP(LN x)) or parallel (attention and MLP read the same "
        "normalised input and add to the residual together)",
    )
    p.add_argument("--ckpt-every", type=count, default=None, help="checkpoint every N steps (preset default)")
    p.add_argument(
        "--log",
        action="append",
        choices=("tensorboard", "mlflow"),
        default=None,
        help="also log the metrics for TensorBoard (RUN/tensorboard) or MLflow (RUN/mlruns); repeatable; offline",
    )
    add_device_arg(p, "training is float32 (see --precision); snapshot metrics are computed on the cpu", None)
    p.add_argument(
        "--precision",
        choices=C.PRECISIONS,
        default=None,
        help="fp32 (default: float32 everywhere), tf32 (TF32 matmuls on CUDA) or bf16 (bf16 autocast on CUDA); "
        "tf32/bf16 need a CUDA --device",
    )
    _task_args(p)
    add_run_args(p, seed=False, resume=True)
    p.set_defaults(func=cmd_train, make_config=lambda args: train_config(args, "new"))


def _done(path: Path) -> int:
    print(f"run folder: {path}")
    return 0


def sample_config(args: argparse.Namespace) -> C.SampleConfig:
    return C.SampleConfig(
        n=args.n,
        seq_len=args.seq_len,
        seed=args.seed,
        corpus=args.corpus or C.DEFAULT_CORPUS,
        vocab_chars=64 if args.vocab_chars is None else args.vocab_chars,
        triggers=3 if args.triggers is None else args.triggers,
    )


def cmd_sample(args: argparse.Namespace) -> int:
    from attnlab.bb.run import sample

    with threads(args.threads):
        return _done(sample(sample_config(args), args.out, mode=run_mode(args)).path)


def train_config(args: argparse.Namespace, mode: str) -> C.TrainConfig | Resume:
    """The config of `bb train`: from the preset and flags, or (resume) the flags given as changes to the saved
    config, which the run function reads and checks."""
    given = {field: getattr(args, flag) for flag, field in TRAIN_FLAGS.items() if getattr(args, flag) is not None}
    if mode != "resume":
        return C.resolve_config(args.preset or "cpu", **given)
    return Resume(changes={**({"preset": args.preset} if args.preset is not None else {}), **given})


def cmd_train(args: argparse.Namespace) -> int:
    from attnlab.bb.run import train

    mode = run_mode(args)
    cfg = train_config(args, mode)
    with threads(args.threads):
        result = train(cfg, args.out, mode=mode)
    s = result.summary
    if s.get("nothing_to_do"):
        print(s["nothing_to_do"])
        return 0
    print(
        f"final: step {s['step']}  Attn<s> {_fmt(s.get('attn_sink'))}  "
        f"excess backcopy risk {_fmt(s.get('excess_risk_backcopy'))}  "
        f"excess bigram risk {_fmt(s.get('excess_risk_bigram'))}"
    )
    return _done(result.path)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def intervene_config(args: argparse.Namespace) -> C.InterveneConfig:
    return C.InterveneConfig(str(args.run_dir), device=args.device or "cpu")


def cmd_intervene(args: argparse.Namespace) -> int:
    from attnlab.bb.run import intervene

    with threads(args.threads):
        result = intervene(intervene_config(args), args.out, mode=run_mode(args))
    for r in result.tables["interventions"].to_dict("records"):
        print(f"{r['intervention']:<45} backcopy risk {r['risk_backcopy']:.4g}   bigram risk {r['risk_bigram']:.4g}")
    return _done(result.path)


def theory_config(args: argparse.Namespace) -> C.TheoryConfig:
    return C.TheoryConfig(seed=args.seed, t_max=args.t_max)


def cmd_theory(args: argparse.Namespace) -> int:
    from attnlab.bb.run import theory

    cfg = theory_config(args)
    with threads(args.threads):
        return _done(theory(cfg, args.out, mode=run_mode(args)).path)


def compare_config(args: argparse.Namespace) -> C.CompareConfig:
    return C.CompareConfig(run_dirs=tuple(args.run_dirs), layer=args.layer)


def cmd_compare(args: argparse.Namespace) -> int:
    cfg = compare_config(args)  # a run given twice is refused before torch is imported
    from attnlab.bb.run import compare

    with threads(args.threads):
        return _done(compare(cfg, args.out, mode=run_mode(args)).path)


def subspace_config(args: argparse.Namespace) -> C.SubspaceConfig:
    return C.SubspaceConfig(run_dir=str(args.run_dir), layer=args.layer, energy=args.energy)


def cmd_subspace(args: argparse.Namespace) -> int:
    from attnlab.bb.run import subspace

    cfg = subspace_config(args)
    with threads(args.threads):
        result = subspace(cfg, args.out, mode=run_mode(args))
    s = result.summary
    print(
        f"k attn {s['k_attn']}  k mlp {s['k_mlp']}  smallest angle {s['min_angle_deg']:.1f} deg  "
        f"attention energy in MLP subspace {s['energy_attn_in_mlp']:.4f}"
    )
    return _done(result.path)
