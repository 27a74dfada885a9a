"""`attnlab bb {sample,train,intervene,theory,compare}`: the Bigram-Backcopy study from the command line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.report import Report
from attnlab.runs import RunDir, default_run_dir

DEMO_STEPS = 800


def _int_list(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated layer indices, got {text!r}") from None


def register(sub) -> None:
    bb = sub.add_parser("bb", help="Bigram-Backcopy study: data, toy training, interventions, theory",
                        description="Extreme-token phenomena (attention sinks, value-state drains, residual-state "
                                    "peaks) on the Bigram-Backcopy task.")
    cmds = bb.add_subparsers(dest="bb_command", metavar="SUBCOMMAND")

    p = cmds.add_parser("sample", help="write BB sequences, the bigram matrix and the vocabulary",
                        description="Sample N BB sequences and write sequences.npy (int64 [N, T+1]), bigram.npy "
                                    "(float64 [V, V]) and meta.json (vocabulary, trigger ids, bos id).")
    p.add_argument("--n", type=int, default=512, help="number of sequences (default 512)")
    p.add_argument("--seq-len", type=int, default=256, help="T: each sequence has T+1 tokens (default 256)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    _task_args(p)
    p.add_argument("--out", type=Path, default=None, help="run folder (default runs/bb-sample-<time>)")
    p.set_defaults(func=cmd_sample)

    p = cmds.add_parser("train", help="train a toy transformer on BB and record the phenomena",
                        description="Train a small pre-LN transformer on BB; metrics on a log-spaced schedule go to "
                                    "metrics.jsonl, checkpoints (safetensors + JSON) to checkpoints/, figures and "
                                    "report.html at the end. Ctrl-C saves a checkpoint; --resume continues.")
    p.add_argument("--preset", default="cpu", help="cpu (default; minutes on 2 cores) or paper (the paper's sizes)")
    p.add_argument("--layers", type=int, default=None, help="number of layers (default 1)")
    p.add_argument("--heads", type=int, default=None, help="heads per layer (default 1)")
    p.add_argument("--attention", choices=["softmax", "relu"], default=None, help="attention kind (default softmax)")
    p.add_argument("--optimizer", choices=["adam", "sgd"], default=None, help="AdamW or SGD with momentum 0.9")
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate (default: adam 1e-3 cpu / 3e-4 paper, relu 3e-3, sgd 0.03)")
    p.add_argument("--steps", type=int, default=None, help="optimiser steps (default: the preset's)")
    p.add_argument("--seed", type=int, default=0, help="random seed for init and training batches (default 0)")
    p.add_argument("--d-model", type=int, default=None, help="residual width (preset default)")
    p.add_argument("--d-mlp", type=int, default=None, help="MLP width (preset default)")
    p.add_argument("--seq-len", type=int, default=None, help="T, also the number of learned positions")
    p.add_argument("--batch", type=int, default=None, help="training batch size")
    p.add_argument("--eval-batch", type=int, default=None, help="size of the fixed evaluation batch")
    p.add_argument("--no-attn", type=_int_list, default=None, metavar="L,..", help="layers without attention")
    p.add_argument("--no-mlp", type=_int_list, default=None, metavar="L,..", help="layers without MLP")
    p.add_argument("--linear-mlp", type=_int_list, default=None, metavar="L,..", help="layers with a linear MLP")
    p.add_argument("--ckpt-every", type=int, default=None, help="checkpoint every N steps (preset default)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    _task_args(p)
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its newest checkpoint")
    p.add_argument("--out", type=Path, default=None, help="run folder (default runs/bb-<time>)")
    p.set_defaults(func=cmd_train)

    p = cmds.add_parser("intervene", help="risks of a trained model with heads/MLPs/layers zeroed",
                        description="Zero each head, MLP and layer and force attention onto <s>; writes "
                                    "interventions.json and adds a table to the run's report.html.")
    p.add_argument("run_dir", type=Path, help="a folder written by `attnlab bb train`")
    p.set_defaults(func=cmd_intervene)

    p = cmds.add_parser("theory", help="simulate the mutual-reinforcement and Adam-vs-SGD models",
                        description="Gradient flow on (α, β) of the simplified loss and the scalar residual-norm "
                                    "model under Adam and SGD; figures and fitted slopes.")
    p.add_argument("--seed", type=int, default=0, help="seed of the random laws p_v, π, ξ (default 0)")
    p.add_argument("--t-max", type=float, default=1e9, help="integration horizon (default 1e9)")
    p.add_argument("--out", type=Path, default=None, help="run folder (default runs/bb-theory-<time>)")
    p.set_defaults(func=cmd_theory)

    p = cmds.add_parser("compare", help="overlay metrics of several BB runs (e.g. softmax vs ReLU, Adam vs SGD)",
                        description="One figure per group of metrics with one line per run.")
    p.add_argument("run_dirs", type=Path, nargs="+", help="folders written by `attnlab bb train`")
    p.add_argument("--layer", type=int, default=0, help="layer whose metrics are compared (default 0)")
    p.add_argument("--out", type=Path, default=None, help="run folder (default runs/bb-compare-<time>)")
    p.set_defaults(func=cmd_compare)
    bb.set_defaults(func=lambda args: (bb.print_help(), 1)[1])


def _task_args(p) -> None:
    p.add_argument("--corpus", default=None, help="UTF-8 text file (default: CPython's pydoc_data topics)")
    p.add_argument("--vocab-chars", type=int, default=None, help="characters kept (default 64; 0 keeps all)")
    p.add_argument("--triggers", type=int, default=None, help="k most frequent characters used as triggers (3)")


# ---------------------------------------------------------------------------------------------------------------
def cmd_sample(args) -> int:
    from attnlab.tasks.bb import build_bb_task

    if args.n < 1:
        raise AttnlabError(f"--n {args.n}: need at least one sequence")
    run = RunDir(args.out or default_run_dir("bb-sample"))
    task = build_bb_task(args.corpus, 64 if args.vocab_chars is None else args.vocab_chars,
                         3 if args.triggers is None else args.triggers)
    seqs = task.sample(args.n, args.seq_len, args.seed, stream=2)
    np.save(run.path / "sequences.npy", seqs)
    np.save(run.path / "bigram.npy", task.bigram_matrix())
    run.write_json("meta.json", task.meta())
    run.write_config({"n": args.n, "seq_len": args.seq_len, "seed": args.seed, "corpus": task.source,
                      "vocab_chars": args.vocab_chars, "triggers": args.triggers,
                      "seed_sequence": [args.seed, 2, 0]})
    run.write_manifest(args.seed)
    stats = sample_statistics(task, seqs)
    run.write_json("metrics.json", stats)
    rep = Report("BB sample")
    rep.paragraph(f"{args.n} sequences of {args.seq_len + 1} tokens; triggers "
                  f"{[task.vocab.chars[t] for t in task.triggers]}; V = {task.V}.")
    rep.table([stats], caption="Sample statistics")
    rep.write(run.path / "report.html")
    print(f"run folder: {run.path}")
    return 0


def sample_statistics(task, seqs: np.ndarray) -> dict:
    """Trigger fraction over positions 1..T−1 and the mean oracle entropy at bigram positions."""
    x = seqs[:, :-1]
    trig = task.is_trigger[x]
    o = task.oracle(seqs)
    ent = -(np.where(o > 0, o * np.log(np.where(o > 0, o, 1.0)), 0.0)).sum(-1)
    return {"trigger_fraction": float(trig[:, 1:].mean()), "oracle_bigram_entropy": float(ent[~trig].mean()),
            "n_sequences": int(seqs.shape[0]), "seq_len": int(seqs.shape[1] - 1)}


def cmd_train(args) -> int:
    from attnlab.extreme.experiment import run_training
    from attnlab.extreme.report import write_report
    from attnlab.train.presets import config_from_dict, resolve_config

    out = args.out or default_run_dir("bb")
    if args.resume:
        cfg_path = Path(out) / "config.json"
        if args.out is None or not cfg_path.exists():
            raise AttnlabError(f"--resume needs --out pointing at an existing BB run folder; {cfg_path} not found")
        cfg = config_from_dict(json.loads(cfg_path.read_text()))
        if args.steps is not None:
            cfg.steps = args.steps
    else:
        cfg = resolve_config(
            args.preset, seed=args.seed, n_layers=args.layers, n_heads=args.heads, attention=args.attention,
            optimizer=args.optimizer, lr=args.lr, steps=args.steps, d_model=args.d_model, d_mlp=args.d_mlp,
            seq_len=args.seq_len, batch=args.batch, eval_batch=args.eval_batch, no_attn=args.no_attn,
            no_mlp=args.no_mlp, linear_mlp=args.linear_mlp, ckpt_every=args.ckpt_every, threads=args.threads,
            corpus=args.corpus, vocab_chars=args.vocab_chars, n_triggers=args.triggers)
    run = run_training(cfg, Path(out), resume=args.resume)
    write_report(run.path)
    last = run.metrics()[-1]
    print(f"final: step {last['step']}  Attn<s> {_fmt(last.get('attn_sink'))}  "
          f"excess backcopy risk {_fmt(last.get('excess_risk_backcopy'))}  "
          f"excess bigram risk {_fmt(last.get('excess_risk_bigram'))}")
    print(f"run folder: {run.path}")
    return 0


def _fmt(v) -> str:
    while isinstance(v, list):
        v = v[0] if v else None
    return "-" if v is None else f"{v:.4g}"


def cmd_intervene(args) -> int:
    from attnlab.extreme.intervene import evaluate_interventions
    from attnlab.extreme.report import write_report

    rows = evaluate_interventions(args.run_dir)
    RunDir(args.run_dir).write_json("interventions.json", rows)
    for r in rows:
        print(f"{r['intervention']:<45} backcopy risk {r['risk_backcopy']:.4g}   bigram risk {r['risk_bigram']:.4g}")
    write_report(args.run_dir)
    print(f"run folder: {args.run_dir}")
    return 0


def _theory(out: Path, seed: int, t_max: float = 1e9) -> Report:
    try:
        from attnlab.extreme.theory.run import run_theory
    except ModuleNotFoundError as exc:
        raise AttnlabError(f"the theory module is not available in this checkout ({exc.name})") from None
    return run_theory(out, seed=seed, t_max=t_max)


def cmd_theory(args) -> int:
    out = args.out or default_run_dir("bb-theory")
    _theory(out, args.seed, args.t_max)
    print(f"run folder: {out}")
    return 0


def cmd_compare(args) -> int:
    run = RunDir(args.out or default_run_dir("bb-compare"))
    rep = compare_report(args.run_dirs, run.path, args.layer)
    rep.write(run.path / "report.html")
    print(f"run folder: {run.path}")
    return 0


def compare_report(run_dirs: list[Path], out: Path, layer: int = 0, title: str = "BB runs compared") -> Report:
    from attnlab.viz.bb import compare_runs

    runs, lin_until = {}, 500
    for d in run_dirs:
        cfg_path = Path(d) / "config.json"
        if not cfg_path.exists():
            raise AttnlabError(f"{d} is not a BB run folder (no config.json)")
        cfg = json.loads(cfg_path.read_text())
        label = f"{cfg['attention']}/{cfg['optimizer']} lr {cfg['lr']:g} ({Path(d).name})"
        runs[label] = RunDir(d).metrics()
        lin_until = cfg.get("lin_until", lin_until)
    rep = Report(title)
    groups = {"sink": ("attn_sink", "value_norm_bos", "resid_norm_bos"),
              "risk": ("excess_risk_backcopy", "excess_risk_bigram", "delta_logit")}
    for name, keys in groups.items():
        path = compare_runs(runs, Path(out) / "figures" / f"compare_{name}.png", keys, lin_until, layer)
        rep.figure(path, f"{', '.join(keys)} for {len(runs)} runs")
    return rep


# ---------------------------------------------------------------------------------------------------------------
def run_demo(out: Path, seed: int) -> Report:
    """Sample; 1-layer softmax/Adam, ReLU/Adam and softmax/SGD runs; interventions; comparisons; theory."""
    from attnlab.extreme.experiment import run_training
    from attnlab.extreme.intervene import evaluate_interventions
    from attnlab.extreme.report import build_report, summary_rows
    from attnlab.train.presets import resolve_config

    out = Path(out)
    rep = Report("Extreme tokens on the Bigram-Backcopy task")
    cmd_sample(argparse.Namespace(n=64, seq_len=256, seed=seed, corpus=None, vocab_chars=None, triggers=None,
                                  out=out / "sample"))
    variants = {"softmax": dict(attention="softmax"), "relu": dict(attention="relu"),
                "sgd": dict(attention="softmax", optimizer="sgd")}
    runs = {}
    for name, kw in variants.items():
        cfg = resolve_config("cpu", steps=DEMO_STEPS, seed=seed, ckpt_every=DEMO_STEPS, **kw)
        runs[name] = run_training(cfg, out / name).path
    rows = evaluate_interventions(runs["softmax"])
    RunDir(runs["softmax"]).write_json("interventions.json", rows)
    final = {name: summary_rows(RunDir(p).metrics())[-1] for name, p in runs.items()}
    rep.table([{"run": name, **r} for name, r in final.items()],
              caption=f"Final metrics after {DEMO_STEPS} steps (cpu preset sizes)")
    for name, path in runs.items():
        section = build_report(path)
        section.write(path / "report.html")
        rep.extend(section, level=3)
    rep.extend(compare_report([runs["softmax"], runs["relu"]], out / "compare_attention",
                              title="Softmax vs ReLU attention"), level=3)
    rep.extend(compare_report([runs["softmax"], runs["sgd"]], out / "compare_optimizer",
                              title="Adam vs SGD (1 layer)"), level=3)
    rep.extend(_theory(out / "theory", seed), level=3)
    return rep
