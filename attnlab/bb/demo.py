"""The BB part of `attnlab demo`: sample; 1-layer softmax/Adam, ReLU/Adam and softmax/SGD runs; interventions on
the softmax run; two comparisons; the theory run. Each is a run folder under `out/`."""

from __future__ import annotations

from pathlib import Path

from attnlab.bb import report as bb_report
from attnlab.bb.config import CompareConfig, InterveneConfig, SampleConfig, TheoryConfig, resolve_config
from attnlab.bb.run import compare, intervene, sample, theory, train
from attnlab.report import Report
from attnlab.runs import RunDir

DEMO_STEPS = 800
VARIANTS = {
    "softmax": dict(attention="softmax"),
    "relu": dict(attention="relu"),
    "sgd": dict(attention="softmax", optimizer="sgd"),
}


def run_demo(out: str | Path, seed: int) -> Report:
    """Run every BB command on small settings into `out/<name>` and return the combined report section."""
    out = Path(out)
    rep = Report("Extreme tokens on the Bigram-Backcopy task")
    sample(SampleConfig(n=64, seq_len=256, seed=seed), out / "sample")
    runs = {}
    for name, kw in VARIANTS.items():
        cfg = resolve_config("cpu", steps=DEMO_STEPS, seed=seed, ckpt_every=DEMO_STEPS, **kw)
        runs[name] = train(cfg, out / name).path
    ivs = intervene(InterveneConfig(str(runs["softmax"])), out / "intervene").path
    final = {name: bb_report.summary_rows(RunDir(p).metrics())[-1] for name, p in runs.items()}
    rep.table(
        [{"run": name, **r} for name, r in final.items()],
        caption=f"Final metrics after {DEMO_STEPS} steps (cpu preset sizes)",
    )
    for path in runs.values():
        rep.extend(bb_report.train_report(path), level=3)
    rep.extend(bb_report.intervene_report(ivs), level=3)
    for name, pair, title in (
        ("compare_attention", ("softmax", "relu"), "Softmax vs ReLU attention"),
        ("compare_optimizer", ("softmax", "sgd"), "Adam vs SGD (1 layer)"),
    ):
        cfg_c = CompareConfig(run_dirs=tuple(str(runs[k]) for k in pair), title=title)
        rep.extend(bb_report.compare_report(compare(cfg_c, out / name).path), level=3)
    rep.extend(bb_report.theory_report(theory(TheoryConfig(seed=seed), out / "theory").path), level=3)
    return rep
