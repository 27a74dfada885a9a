"""`series train` report: reads the run folder only, writes report.html."""

from __future__ import annotations

from pathlib import Path

from attnlab.report import Report
from attnlab.runs import RunDir
from attnlab.series import figures


def write_report(
    path: str | Path, title: str = "Checkpoint series: a small model trained on Bigram-Backcopy"
) -> Report:
    """Settings, the loss curve, the checkpoints and the command that scans them as a series."""
    run = RunDir(path)
    cfg, s, metrics = run.read_config(), run.read_json("summary.json"), run.metrics()
    rep = Report(title)
    rep.paragraph(
        f"A transformers {cfg.get('arch', 'gpt2')} model ({cfg['n_layers']} layers, width {cfg['d_model']}, "
        f"{cfg['n_heads']} heads, MLP "
        f"{cfg['d_mlp']}) trained with AdamW (lr {cfg['lr']:g}) on Bigram-Backcopy sequences of {cfg['seq_len']} "
        f"tokens with <s> at position 0, batch {cfg['batch']}, {cfg['steps']} steps; a HF checkpoint every "
        f"{cfg['save_every']} steps in checkpoints/step_N ({s['checkpoints']} checkpoints). Wall time "
        f"{s['wall_seconds']} s (this invocation)."
    )
    rep.figure(figures.loss_curve(metrics, run.figure_path("loss")), "Loss at each checkpoint")
    rep.paragraph(
        "Scan the series: attnlab scan --model RUN/checkpoints --text RUN/bb_eval.txt --prefix bos "
        f"--tokens {cfg['seq_len']} --samples 8 (the sink-head dynamics land in sink_dynamics.csv)."
    )
    rep.table(metrics, caption="metrics.jsonl")
    rep.write(run.file("report.html"))
    return rep
