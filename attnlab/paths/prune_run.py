"""The pruning pipeline (spec §8, §9.3): GD training on digit episodes -> hand-off of Q/K -> theory U (N, T chosen
on validation episodes) -> head scores -> single-head and progressive pruning drops of the GD network."""

from __future__ import annotations

import argparse

import numpy as np
import torch

from attnlab.paths import plots
from attnlab.paths.experiment import build_data, theory_point
from attnlab.paths.kernels import scaled_paths
from attnlab.paths.network import PathConfig, PathNetwork
from attnlab.paths.predictor import metrics, predict
from attnlab.paths.pruning import head_labels, head_scores, progressive_orders, spearman
from attnlab.paths.tasks.digits import digit_episodes
from attnlab.paths.train import GDNetwork, accuracy, save_checkpoint, train_gd
from attnlab.report import Report
from attnlab.runs import RunDir


def run_prune(args: argparse.Namespace, run: RunDir) -> dict:
    torch.manual_seed(args.seed)
    model = GDNetwork(23, args.heads, args.layers, args.width, args.d_qk, "mean", args.seed)
    log = train_gd(model, args.steps, seed=args.seed, pool_size=args.pool)
    save_checkpoint(model, run.path / "gd_model")
    xte, yte = digit_episodes(args.n_test, "test")
    xva, yva = digit_episodes(500, "val")
    acc_full = accuracy(model, xte, yte)
    cfg = model.to_config()
    # hand-off check: the theory's float64 attention reproduces the trained network's
    with torch.no_grad():
        a_gd = model.attention(torch.tensor(xte[:50], dtype=torch.float32), 0).double()
    a_th = PathNetwork(cfg).attention(torch.tensor(xte[:50]))[0]
    handoff_err = float((a_gd - a_th).abs().max())
    data = build_data("digits", args.P, args.n_test, cfg=cfg)
    xit_val = scaled_paths(PathNetwork(cfg).paths(torch.tensor(xva)))
    best, grid = None, []
    for N in args.Ns:
        for T in args.temperatures:
            sp, rec = theory_point(data, N, T, hessian=False)
            val = metrics(predict(sp.U, data.gram, data.y_train, T, xit_val), yva)["accuracy"]
            grid.append({"N": N, "T": T, "val_accuracy": val, "test_accuracy": rec["accuracy"],
                         "accuracy_gp": rec["accuracy_gp"], "converged": rec["converged"]})
            if best is None or val > best[0]:
                best = (val, N, T, sp)
    _, N, T, sp = best
    scores = head_scores(sp.U, cfg.H)
    labels = head_labels(cfg.H)
    drops = []
    for lh in labels:
        model.set_pruned([lh])
        drops.append(acc_full - accuracy(model, xte, yte))
    model.set_pruned([])
    rho = spearman(scores, drops)
    theory_drops = _theory_drops(cfg, args, N, T, labels)
    rho_theory = spearman(scores, theory_drops)
    curves = {}
    for name, order in progressive_orders(scores, 5, args.seed).items():
        accs, removed = [acc_full], []
        for i in order:
            removed.append(labels[i])
            if sum(1 for l, _ in removed if l == labels[i][0]) >= cfg.H[labels[i][0]]:
                break  # never remove the last head of a layer
            model.set_pruned(removed)
            accs.append(accuracy(model, xte, yte))
        curves[name] = accs
    model.set_pruned([])
    names = [f"L{l + 1}H{h}" for l, h in labels]
    order = np.argsort(scores)
    out = {"gd_test_accuracy": acc_full, "gd_val_accuracy": accuracy(model, xva, yva), "handoff_attention_err": handoff_err,
           "chosen_N": N, "chosen_T": T, "grid": grid, "score": scores, "acc_drop": drops, "spearman_rho": rho,
           "heads": names, "drops_lowest2": [drops[i] for i in order[:2]], "drops_highest2": [drops[i] for i in order[-2:]],
           "progressive": curves, "U": sp.U, "train_log": log,
           "theory_accuracy": float(grid_best_test(grid, N, T)), "theory_acc_drop": theory_drops,
           "spearman_rho_theory": rho_theory}
    run.write_json("metrics.json", out)
    rep = Report("attention paths: head scores and pruning (digits)")
    rep.paragraph(f"GD network: {args.layers} layers x {args.heads} heads, width {args.width}, {args.steps} steps; "
                  f"test accuracy {acc_full:.3f}. Theory (N={N}, T={T}, chosen on validation episodes). "
                  f"Hand-off attention max error {handoff_err:.2e}. Spearman rho(score, GD drop) = {rho:.2f}; rho(score, theory refit drop) = {rho_theory:.2f}.")
    rep.table(grid, "validation grid")
    rep.table([{"head": names[i], "score": scores[i], "acc_drop": drops[i], "theory_acc_drop": theory_drops[i]}
               for i in order], "heads by score (GD drop; theory drop = refit without the head)")
    rep.figure(plots.head_scores(run.figure_path("head_scores"), names, scores, np.array(drops), rho))
    rep.figure(plots.progressive(run.figure_path("progressive_pruning"), curves))
    rep.write(run.path / "report.html")
    print(f"GD test accuracy {acc_full:.3f}; Spearman rho(score, GD drop) = {rho:.2f}, "
          f"rho(score, theory drop) = {rho_theory:.2f}")
    return out


def grid_best_test(grid: list[dict], N: float, T: float) -> float:
    return next(g["test_accuracy"] for g in grid if g["N"] == N and g["T"] == T)


def _theory_drops(cfg: PathConfig, args: argparse.Namespace, N: float, T: float,
                  labels: list[tuple[int, int]]) -> list[float]:
    """Theory-side analogue of single-head pruning: refit U without the head (its layer's head sum then has
    H_l - 1 terms, and the path normalisation 1/sqrt(n_paths) of [K1] rescales accordingly)."""
    full = build_data("digits", args.P, args.n_test, cfg=cfg)
    _, rec = theory_point(full, N, T, hessian=False)
    out = []
    for l, h in labels:
        layers = [[hd for k, hd in enumerate(heads) if (i, k) != (l, h)] for i, heads in enumerate(cfg.layers)]
        sub = PathConfig(layers, cfg.widths, cfg.variances, cfg.readout)
        _, r = theory_point(build_data("digits", args.P, args.n_test, cfg=sub), N, T, hessian=False)
        out.append(rec["accuracy"] - r["accuracy"])
    return out
