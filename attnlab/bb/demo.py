"""The BB part of `attnlab demo`: sample; 1-layer softmax/Adam, ReLU/Adam and softmax/SGD runs; interventions on
the softmax run; two comparisons; the theory run. Each is a run folder under `out/` with the report its run wrote;
the demo's section links those reports (it never renders them again)."""

from __future__ import annotations

import html
from pathlib import Path

from attnlab.bb.config import CompareConfig, InterveneConfig, SampleConfig, TheoryConfig, resolve_config
from attnlab.bb.run import compare, intervene, sample, theory, train
from attnlab.bb.tables import summary_rows
from attnlab.report import Report
from attnlab.runs import RunDir

DEMO_STEPS = 800
VARIANTS = {
    "softmax": dict(attention="softmax"),
    "relu": dict(attention="relu"),
    "sgd": dict(attention="softmax", optimizer="sgd"),
}


def report_links(out: Path, runs: dict[str, str]) -> str:
    """A list of links to the report.html of each run folder out/<name>, {name: text}, relative to the folder
    holding `out` (where `attnlab demo` writes its combined report)."""
    items = "".join(
        f'<li><a href="{html.escape(f"{out.name}/{name}/report.html")}">{html.escape(text)}</a> '
        f"<code>{html.escape(f'{out.name}/{name}')}</code></li>"
        for name, text in runs.items()
    )
    return f"<ul>{items}</ul>"


def run_demo(out: str | Path, seed: int) -> Report:
    """Run every BB command on small settings into `out/<name>` and return the demo's section: the final metrics
    of the three training runs and a link to every run's report."""
    out = Path(out)
    rep = Report("Extreme tokens on the Bigram-Backcopy task")
    sample(SampleConfig(n=64, seq_len=256, seed=seed), out / "sample")
    runs = {}
    for name, kw in VARIANTS.items():
        cfg = resolve_config("cpu", steps=DEMO_STEPS, seed=seed, ckpt_every=DEMO_STEPS, **kw)
        runs[name] = train(cfg, out / name).path
    intervene(InterveneConfig(str(runs["softmax"])), out / "intervene")
    titles = {"sample": "BB sample", **{name: f"bb train: {name}" for name in runs}}
    titles["intervene"] = "Interventions on the softmax run's final model"
    for name, pair, title in (
        ("compare_attention", ("softmax", "relu"), "Softmax vs ReLU attention"),
        ("compare_optimizer", ("softmax", "sgd"), "Adam vs SGD (1 layer)"),
    ):
        compare(CompareConfig(run_dirs=tuple(str(runs[k]) for k in pair), title=title), out / name)
        titles[name] = title
    theory(TheoryConfig(seed=seed), out / "theory")
    titles["theory"] = "Theory: mutual reinforcement and the Adam residual peak"
    final = {name: summary_rows(RunDir(p).metrics())[-1] for name, p in runs.items()}
    rep.table(
        [{"run": name, **r} for name, r in final.items()],
        caption=f"Final metrics after {DEMO_STEPS} steps (cpu preset sizes)",
    )
    rep.raw(f"<p>The report of each run:</p>{report_links(out, titles)}")
    return rep
