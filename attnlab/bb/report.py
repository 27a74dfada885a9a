"""Figures and report.html of a BB run folder (training metrics, attention map, value bars, interventions)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from attnlab.extreme.experiment import load_run
from attnlab.report import Report
from attnlab.runs import RunDir
from attnlab.trace.toy import trace_toy
from attnlab.viz import bb as viz

SUMMARY_KEYS = ("attn_sink", "delta_logit", "value_norm_bos", "value_norm_others", "resid_norm_bos",
                "resid_norm_others", "excess_risk_backcopy", "excess_risk_bigram", "loss")


def _pick(v):
    while isinstance(v, list):
        v = v[0] if v else None
    return v


def summary_rows(metrics: list[dict], steps=(0, 100, 200, 400, 1000)) -> list[dict]:
    """Metrics at a few steps and at the end (first layer/head for multi-layer runs)."""
    by_step = {r["step"]: r for r in metrics}
    chosen = [s for s in steps if s in by_step] + ([metrics[-1]["step"]] if metrics else [])
    rows = []
    for s in dict.fromkeys(chosen):
        r = by_step[s]
        rows.append({"step": s, **{k: _pick(r.get(k)) for k in SUMMARY_KEYS}})
    return rows


def draw_run_figures(run_dir: Path) -> dict[str, Path]:
    """Dynamics, attention map of evaluation sequence 0 and value-norm bars for the final model."""
    run = RunDir(run_dir)
    metrics = run.metrics()
    cfg, task, model, state = load_run(run.path)
    figs = {}
    label = f"{cfg.n_layers}-layer {cfg.attention}, {cfg.optimizer} lr {cfg.resolved_lr():g}"
    for layer in range(cfg.n_layers):
        name = "dynamics" if layer == 0 else f"dynamics_layer{layer}"
        figs[name] = viz.dynamics(metrics, run.figure_path(name), cfg.lin_until, layer,
                                  title=f"{label}: layer {layer}")
    seqs = task.eval_batch(cfg.eval_batch, cfg.seq_len, cfg.eval_seed)
    attn_layers = [l for l in range(cfg.n_layers) if l not in cfg.no_attn]
    T = min(32, cfg.seq_len)
    if attn_layers:
        import torch

        tr, _ = trace_toy(model, torch.as_tensor(seqs[:1, :-1]), task.V, keep_patterns=[(attn_layers[0], 0)])
        pattern = tr.patterns[f"{attn_layers[0]}.0"][0][:T, :T]
        figs["attention_map"] = viz.attention_map(pattern, seqs[0, :T].tolist(), task.vocab.token_names(),
                                                  task.triggers, run.figure_path("attention_map"),
                                                  title=f"layer {attn_layers[0]} head 0, step {state['step']}")
        full, _ = trace_toy(model, torch.as_tensor(seqs[:, :-1]), task.V)
        norms = full.value_norm[attn_layers[0], 0, :10]
        figs["value_norms"] = viz.value_norm_bars(norms.tolist(), ["<s>"] + [f"x{i}" for i in range(1, 10)],
                                                  run.figure_path("value_norms"),
                                                  title=f"‖W_O v_i‖, first positions (step {state['step']})")
    return figs


def build_report(run_dir: Path) -> Report:
    """The run's report section: summary table, figures and (if present) the interventions table."""
    run = RunDir(run_dir)
    cfg = json.loads((run.path / "config.json").read_text())
    rep = Report(f"BB run: {cfg['n_layers']}-layer {cfg['attention']} attention, {cfg['optimizer']} "
                 f"(lr {cfg['lr']:g}, seed {cfg['seed']})")
    rep.paragraph(f"Run folder: {run.path}. Preset {cfg['preset']}: d_model {cfg['d_model']}, T {cfg['seq_len']}, "
                  f"batch {cfg['batch']}, {cfg['steps']} steps; metrics on a fixed evaluation batch of "
                  f"{cfg['eval_batch']} sequences.")
    summary = run.path / "train_summary.json"
    if summary.exists():
        s = json.loads(summary.read_text())
        rep.paragraph(f"Training wall time: {s.get('wall_seconds')} s (this invocation).")
    rep.table(summary_rows(run.metrics()), caption="Metrics over training (layer 0, head 0)")
    figs = draw_run_figures(run.path)
    captions = {"dynamics": "The three phenomena over training: attention sink, Δlogit, value-state drain, "
                            "residual-state norms, excess risks and losses (linear then log step axis).",
                "attention_map": "Attention of evaluation sequence 0 (first 32 tokens); triggers in red.",
                "value_norms": "‖W_O v_i‖ for the first positions: the <s> bar (red) drains."}
    for name, path in figs.items():
        rep.figure(path, captions.get(name, name))
    probe = probe_rows(run.path)
    if probe:
        rep.table(probe, caption="Active-token probe (§6.6): input [<s>, every character, probe]; the probe is "
                                 "active when its attention to <s> is below 0.89")
    iv = run.path / "interventions.json"
    if iv.exists():
        rep.table(json.loads(iv.read_text()), caption="Interventions on the final model (evaluation batch)")
    return rep


def probe_rows(run_dir: Path) -> list[dict]:
    """Which query tokens are active (attend away from <s>) in each attention layer of the final model."""
    from attnlab.extreme.metrics import active_token_probe

    cfg, task, model, _ = load_run(run_dir)
    rows = []
    for layer in range(cfg.n_layers):
        if layer in cfg.no_attn or cfg.attention != "softmax":
            continue
        p = active_token_probe(model, task, layer=layer)
        names = task.vocab.token_names()
        rows.append({"layer": layer, "active tokens": " ".join(names[t] for t in p["active_tokens"]) or "none",
                     "triggers": " ".join(names[t] for t in task.triggers),
                     "active = triggers": p["active_equals_triggers"]})
    return rows


def write_report(run_dir: Path) -> Path:
    return build_report(run_dir).write(Path(run_dir) / "report.html")


def final_metrics(run_dir: Path) -> dict:
    m = RunDir(run_dir).metrics()
    return m[-1] if m else {}


def as_float(x) -> float:
    return float(np.asarray(_pick(x), dtype=float))
