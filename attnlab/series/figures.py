"""`series train` figures, drawn from metrics.jsonl only (matplotlib Figure objects, no pyplot); `report.py` calls
`train_figures(run)`."""

from __future__ import annotations

from pathlib import Path

from attnlab.reports.plotting import new_figure, save_figure
from attnlab.runs import STEPPED, RunDir


def train_figures(run: RunDir) -> dict[str, Path]:
    """The loss curve of a `series train` run from its metrics.jsonl."""
    return {"loss": loss_curve(run.metrics(STEPPED), run.figure_path("loss"))}


def loss_curve(metrics: list[dict], path: Path) -> Path:
    """Training loss (of the update before each checkpoint) and evaluation loss against the step."""
    fig, axes = new_figure(1, 1, width=5.0, height=3.2)
    ax = axes[0][0]
    steps = [r["step"] for r in metrics]
    ax.plot(steps, [r["eval_loss"] for r in metrics], marker=".", label="evaluation batch")
    train = [(r["step"], r["train_loss"]) for r in metrics if r.get("train_loss") is not None]
    if train:
        ax.plot(*zip(*train, strict=True), ls="--", label="training batch")
    ax.set_xlabel("step (checkpoints)")
    ax.set_ylabel("cross-entropy")
    ax.legend(fontsize=8)
    return save_figure(fig, path)
