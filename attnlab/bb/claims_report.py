"""Report sections of the authors' claims (spec extreme-tokens §14, R19–R22), built from run folders only."""

from __future__ import annotations

from pathlib import Path

from attnlab.report import Report
from attnlab.runs import RunDir


def subspace_report(run_dir: str | Path) -> Report:
    """`bb subspace`: the R19 numbers and the spectra/angles figure."""
    run = RunDir(run_dir)
    cfg = run.read_config()
    m = run.read_json("subspace.json")
    rep = Report("Attention and MLP output subspaces (R19)")
    rep.paragraph(
        f"Training run: {Path(cfg['run_dir']).name} ({m['block']} block), layer {cfg['layer']}, step {m['step']}. "
        f"Rows: the attention and MLP outputs of all {m['n_vectors']} (sequence, position) pairs of the evaluation "
        f"batch; each subspace keeps the top-k right singular vectors holding {m['energy']:.0%} of the energy. "
        "A random subspace of the MLP's dimension would hold k_mlp / d_model of the attention energy."
    )
    keys = (
        "k_attn",
        "k_mlp",
        "min_angle_deg",
        "median_angle_deg",
        "energy_attn_in_mlp",
        "random_baseline_attn_in_mlp",
        "energy_mlp_in_attn",
        "random_baseline_mlp_in_attn",
    )
    rep.table([{k: m[k] for k in keys}], caption="Subspace measure")
    rep.figure(run.path / "figures" / "subspace.png", "Output spectra and principal angles")
    return rep
