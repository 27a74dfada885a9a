"""The authors' own claims (consensus spec, last section): experiments and verdicts for R12, R13, R14.

Each `verdict_<id>(run_dir) -> (number, met, why)` reads saved files only (never recomputes), for the
reproduction table:

- R12, the counterexample: `run_R12(out)` runs `consensus simulate --key-query zero` twice, with `--value identity`
  (`out/identity`) and `--value rotation` (`out/rotation`); the claim is met when the first reaches consensus in
  every start and the second in none; `figures.figure_R12` draws `out/R12.png` from the two runs' arrays.
- R13, normalisation as projection: `consensus norm` (attnlab/consensus/normproj.py) writes `metrics.json`; the
  claim is met when the idealised map's relative error stays below `R13_TOL` in every layer.
- R14, "all tokens become one token": `consensus model` writes `decode.json` (every position decoded through the
  final norm and head at every pass end); the claim is met when, after the last pass, the mean share of a prompt's
  positions holding its most common top-1 token is >= `R14_SHARE` in every group run (MLPs off and on).
"""

from __future__ import annotations

from pathlib import Path

from attnlab.runs import read_json

# R12: a start has reached consensus when E_first < 1e-6 (the `share_E_first_below_1e-6` of simulate)
R12_VALUES = ("identity", "rotation")
# R13: the idealisation is called good when its relative error is below this in every layer (our threshold)
R13_TOL = 0.1
# R14: "one token" read as at least this share of a prompt's positions decoding to its most common token (a first
# guess, ours: the authors give no number)
R14_SHARE = 0.9


def run_R12(
    out: str | Path, n: int = 16, d: int = 4, batch: int = 16, t_max: float = 30.0, seed: int = 0
) -> dict[str, Path]:
    """Q = K = 0 with V = I and with V = J (rotation): two `consensus simulate` runs under `out`, plus the
    figure `out/R12.png`. Returns {value: run folder}."""
    from attnlab.consensus.config import SimulateConfig
    from attnlab.consensus.figures import figure_R12
    from attnlab.consensus.run import simulate

    out = Path(out)
    paths = {}
    for value in R12_VALUES:
        cfg = SimulateConfig(n=n, d=d, batch=batch, key_query="zero", value=value, t_max=t_max, seed=seed)
        paths[value] = simulate(cfg, out / value, mode="overwrite", progress=False).path
    figure_R12(out, R12_VALUES)
    return paths


def verdict_R12(run_dir: str | Path) -> tuple[float, bool, str]:
    """(share of V = J starts that reach consensus, met, why): met when every V = I start reaches consensus
    (E_first < 1e-6) and no V = J start does."""
    run_dir = Path(run_dir)
    share = {v: float(read_json(run_dir / v / "metrics.json")["share_E_first_below_1e-6"]) for v in R12_VALUES}
    met = share["identity"] == 1.0 and share["rotation"] == 0.0
    why = (
        f"Q = K = 0: consensus in {share['identity']:.0%} of starts with V = I and {share['rotation']:.0%} with "
        "V = J (skew); V = I satisfies the symmetric-V assumption, V = J violates it"
    )
    return share["rotation"], met, why


def verdict_R13(run_dir: str | Path) -> tuple[float, bool, str]:
    """(largest per-layer relative error of the sphere idealisation, met, why): met when it is below `R13_TOL`
    in every layer and the consensus curves of the real and idealised maps agree in direction."""
    m = read_json(Path(run_dir) / "metrics.json")
    worst = float(max(m["rel_error_mean"]))
    same = bool(m["same_conclusion"])
    met = worst < R13_TOL and same
    why = (
        f"largest per-layer mean relative error {worst:.3g} (threshold {R13_TOL}); consensus with the idealised "
        f"norm {'agrees' if same else 'disagrees'} with the real one (E_first falls {m['fall_real']:.2f} vs "
        f"{m['fall_ideal']:.2f} decades over {m['passes']} passes)"
    )
    return worst, met, why


def verdict_R14(run_dir: str | Path) -> tuple[float, bool, str]:
    """(smallest over groups of the mean share of positions decoding to the prompt's most common top-1 token after
    the last pass, met, why) from a `consensus model` run's `decode.json`: met when it is >= `R14_SHARE` in every
    group (MLPs off and on)."""
    groups = read_json(Path(run_dir) / "decode.json", "decode.json (a `consensus model` run)")["groups"]
    final = {g: v["final"] for g, v in groups.items()}
    worst = float(min(f["share_mean"] for f in final.values()))
    parts = [
        f"{g}: {f['share_mean']:.2f} (min {f['share_min']:.2f}; positions >= 1 {f['share_no_sink_mean']:.2f}; "
        f"{f['distinct_mean']:.1f} distinct; most common {f['mode_token_text']!r})"
        for g, f in final.items()
    ]
    passes = max(v["passes"][-1] for v in groups.values())
    why = f"share of positions with the most common top-1 token after {passes} passes: " + "; ".join(parts)
    return worst, worst >= R14_SHARE, why + f" (threshold {R14_SHARE})"
