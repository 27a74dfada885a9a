"""Verdicts of the authors' claims R24 and R25 (spec extreme-tokens §14) from `attnlab scan` run folders.

Each `verdict_<id>(run_dir) -> (number, met, why)` reads a scan folder and never loads a model.

R24 — sink tokens beyond token 0: the number is the largest share, over the domains, of windows in which the
authors' procedure (`attnlab.scan.sinkproc`) finds a head with a sink on a candidate token other than 0; met when
it is at least `R24_MIN_WINDOWS` (our first guess for "they exist": seen in a quarter of the windows, not once).

R25 — mutual reinforcement along a checkpoint series (sink_dynamics.csv of a series scan): the onset of a metric
is the first checkpoint where it has made half of its change from the first checkpoint to its extreme
(`attnlab.scan.series.onset`). Met when Attn⟨s⟩ of the sink heads rises by at least `R25_MIN_SINK_RISE`, the
value-norm ratio of token 0 falls, the residual-norm ratio of token 0 grows, and
onset(sink) ≤ onset(value drain) ≤ onset(residual peak). The number is onset(residual) − onset(sink) in steps.
"""

from __future__ import annotations

from pathlib import Path

from attnlab.errors import InputError
from attnlab.runs import read_json

Verdict = tuple[float, bool, str]
R24_MIN_WINDOWS = 0.25
R25_MIN_SINK_RISE = 0.2  # Attn⟨s⟩ must rise by at least this much for "the sink rises"


def verdict_R24(run_dir: str | Path) -> Verdict:
    """(largest share of windows with a sink beyond token 0, met, why) from a single-model scan folder."""
    s = read_json(Path(run_dir) / "summary.json", "scan summary")
    procs = s.get("sink_procedure")
    if not procs:
        raise InputError(f"{run_dir} has no sink-procedure results (a scan from before R24, or a series scan)")
    best = max(float(p["windows_with_beyond0_sink"]) for p in procs)
    parts = [
        f"{p['domain']}: a sink beyond token 0 in {p['windows_with_beyond0_sink']:.0%} of windows (layers "
        f"{p['beyond0_sink_layers']}, tokens {p['beyond0_sunk_tokens'] or 'none'}), {p['authors_sink_heads_beyond0']} "
        f"heads do so in half of them; {p['authors_sink_heads']} authors' sink heads vs {p['key0_sink_heads']} "
        f"key-0 sink heads, Jaccard {p['jaccard']:.2f}"
        for p in procs
    ]
    why = f"ratio {procs[0]['ratio']:g}×, threshold {procs[0]['threshold']:g}: " + "; ".join(parts)
    return best, best >= R24_MIN_WINDOWS, why


def verdict_R25(run_dir: str | Path, domain: str | None = None) -> Verdict:
    """(onset(residual) − onset(sink) in steps, met, why) from a series scan folder (its first domain, or
    `domain`)."""
    from attnlab.scan.series import onset

    s = read_json(Path(run_dir) / "summary.json", "scan summary")
    rows = s.get("sink_dynamics")
    if not rows:
        raise InputError(f"{run_dir} has no sink_dynamics (not a checkpoint-series scan, or one from before R25)")
    domain = domain or rows[0]["domain"]
    rows = [r for r in rows if r["domain"] == domain]
    if len(rows) < 2:
        raise InputError(f"{run_dir}: domain {domain!r} has fewer than two checkpoints")
    steps = [int(r["step"]) for r in rows]
    sink, value, resid = ([float(r[k]) for r in rows] for k in ("attn_sink", "value_norm_ratio", "resid_norm_ratio"))
    on = {
        "sink": onset(steps, sink, rising=True),
        "value drain": onset(steps, value, rising=False),
        "residual peak": onset(steps, resid, rising=True),
    }
    early = [onset(steps, v, rising=up, fraction=0.2) for v, up in ((sink, True), (value, False), (resid, True))]
    rise = max(sink) - sink[0]
    moved = rise >= R25_MIN_SINK_RISE and all(v is not None for v in on.values())
    ordered = moved and on["sink"] <= on["value drain"] <= on["residual peak"]  # type: ignore[operator]
    why = (
        f"{domain}, sink heads {rows[-1]['sink_heads']}: Attn⟨s⟩ {sink[0]:.2f} → max {max(sink):.2f}, value-norm "
        f"ratio {value[0]:.2f} → min {min(value):.2f}, residual-norm ratio {resid[0]:.2f} → max {max(resid):.2f}; "
        "onsets (half of the change): "
        + ", ".join(f"{k} {v if v is not None else 'none'}" for k, v in on.items())
        + " (a fifth of it: "
        + ", ".join(f"{k} {v if v is not None else 'none'}" for k, v in zip(on, early))
        + ")"
    )
    gap = (
        float(on["residual peak"] - on["sink"])
        if on["sink"] is not None and on["residual peak"] is not None
        else float("nan")
    )
    return gap, bool(ordered), why
