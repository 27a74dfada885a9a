"""The BB part of `attnlab demo`: sample; 1-layer softmax/Adam, ReLU/Adam and softmax/SGD runs; interventions on
the softmax run; two comparisons; the theory run. Each is a run folder under `out/` with the report its run wrote;
the demo's section links those reports (it never renders them again)."""

from __future__ import annotations

from pathlib import Path

from attnlab.bb.config import CompareConfig, InterveneConfig, SampleConfig, TheoryConfig, resolve_config
from attnlab.bb.run import compare, intervene, sample, theory, train
from attnlab.bb.tables import summary_rows
from attnlab.reports.page import Report
from attnlab.runs import STEPPED, RunDir

DEMO_STEPS = 800
VARIANTS = {
    "softmax": dict(attention="softmax"),
    "relu": dict(attention="relu"),
    "sgd": dict(attention="softmax", optimizer="sgd"),
}


def run_demo(out: str | Path, seed: int) -> Report:
    """Run every BB command on small settings into `out/<name>` (each run writes its own report) and return the
    demo's section: the final metrics of the three trainings."""
    out = Path(out)
    rep = Report("Extreme tokens on the Bigram-Backcopy task")
    sample(SampleConfig(n=64, seq_len=256, seed=seed), out / "sample")
    runs = {}
    for name, kw in VARIANTS.items():
        cfg = resolve_config("cpu", steps=DEMO_STEPS, seed=seed, ckpt_every=DEMO_STEPS, **kw)
        runs[name] = train(cfg, out / name).path
    intervene(InterveneConfig(str(runs["softmax"])), out / "intervene")
    final = {name: summary_rows(RunDir(p).metrics(STEPPED))[-1] for name, p in runs.items()}
    rep.table(
        [{"run": name, **r} for name, r in final.items()],
        caption=f"Final metrics after {DEMO_STEPS} steps (cpu preset sizes)",
    )
    for name, pair, title in (
        ("compare_attention", ("softmax", "relu"), "Softmax vs ReLU attention"),
        ("compare_optimizer", ("softmax", "sgd"), "Adam vs SGD (1 layer)"),
    ):
        compare(CompareConfig(run_dirs=tuple(str(runs[k]) for k in pair), title=title), out / name)
    theory(TheoryConfig(seed=seed), out / "theory")
    return rep
