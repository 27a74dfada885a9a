"""`series train` report: reads the run folder only, writes report.html; the figure is drawn by
`attnlab.series.figures` from metrics.jsonl."""

from __future__ import annotations

from pathlib import Path

from attnlab.reports.page import Report
from attnlab.runs import STEPPED, RunDir
from attnlab.series import figures


def write_report(run: RunDir) -> Path:
    """Write report.html of the `series train` run in `run` (atomically): settings, the loss curve, the
    checkpoints and the command that scans them as a series."""
    cfg, s, metrics = run.read_config(), run.read_json("summary.json"), run.metrics(STEPPED)
    rep = Report("Checkpoint series: a small model trained on Bigram-Backcopy")
    rep.paragraph(
        f"A transformers {cfg.get('arch', 'gpt2')} model ({cfg['n_layers']} layers, width {cfg['d_model']}, "
        f"{cfg['n_heads']} heads, MLP "
        f"{cfg['d_mlp']}) trained with AdamW (lr {cfg['lr']:g}) on Bigram-Backcopy sequences of {cfg['seq_len']} "
        f"tokens with <s> at position 0, batch {cfg['batch']}, {cfg['steps']} steps; a HF checkpoint every "
        f"{cfg['save_every']} steps in checkpoints/step_N ({s['checkpoints']} checkpoints). Wall time "
        f"{s['wall_seconds']} s (this invocation)."
    )
    rep.figure(figures.train_figures(run)["loss"], "Loss at each checkpoint")
    rep.paragraph(
        "Scan the series: attnlab scan --model RUN/checkpoints --text RUN/bb_eval.txt --prefix bos "
        f"--tokens {cfg['seq_len']} --samples 8 (the sink-head dynamics land in sink_dynamics.csv)."
    )
    rep.table(metrics, caption="metrics.jsonl")
    return rep.write(run.file("report.html"))
