"""Benchmark: the scan's statistics at another commit against this tree's, in one process, interleaved (issue 23).

The O(T·d) statistics of the fused scan (`tracing.fast.logit_stats`, `value_norms` with the session's matrices
for it, `TraceRecorder.residual` with `_add_massive`; not the recorder's per-layer bookkeeping) are read from
`--base` (a git revision) into temporary modules and swapped in turn with this tree's, around the same SmolLM2
windows; a plain sdpa forward is timed beside them. Prints the largest difference of the trace's numbers between
the two (they must agree to rounding) and the median wall time per window of each.

Usage: .venv/bin/python benchmarks/bench_scan_ab.py --base df9c149 --tokens 4096 --windows 1 --repeats 3
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ("attn_key0_by_query", "logit_key0", "logit_rest", "value_norm", "resid_norm", "median_abs", "max_abs")


def _module_at(rev: str, path: str, name: str, folder: Path):
    """The module `path` of revision `rev`, imported under `name` from a copy in `folder`."""
    source = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True)
    file = folder / f"{name}.py"
    file.write_text(source.stdout)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _session_factor(factor):
    """A `TraceSession.value_factor` computing with `factor` (a revision's value-norm matrices), cached per session."""

    def value_factor(self, layer: int, n_kv: int):
        if (layer, n_kv) not in self.factors:
            self.factors[(layer, n_kv)] = factor(self.arch.w_o_heads(layer), n_kv)
        return self.factors[(layer, n_kv)]

    return value_factor


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git revision whose statistics are compared")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)  # a benchmark process of its own: no library code sets threads
    sys.path.insert(0, str(ROOT))
    from attnlab.hf.loader import load_causal_lm
    from attnlab.hf.texts import domain_windows
    from attnlab.tracing import recorder as R
    from attnlab.tracing.adapters.hf import trace_windows
    from attnlab.tracing.fast import fused as F

    with tempfile.TemporaryDirectory() as tmp:
        old_ha = _module_at(args.base, "attnlab/tracing/adapters/hf_attention.py", "base_hf_attention", Path(tmp))
        old_rec = _module_at(args.base, "attnlab/tracing/recorder.py", "base_recorder", Path(tmp))
    from attnlab.tracing.adapters import hf_attention as HA
    from attnlab.tracing.adapters.hf import TraceSession

    base_factor = getattr(old_ha, "value_factor", None) or old_ha.value_gram  # Gram matrices before the QR factors
    sets = {
        "base": (old_ha._logit_stats, old_ha._value_norms, old_rec.TraceRecorder.residual,
                 old_rec.TraceRecorder._add_massive, _session_factor(base_factor)),
        "this": (F.logit_stats, F.value_norms, R.TraceRecorder.residual, R.TraceRecorder._add_massive,
                 _session_factor(HA.value_factor)),
    }  # fmt: skip

    def use(name: str) -> None:
        (F.logit_stats, F.value_norms, R.TraceRecorder.residual, R.TraceRecorder._add_massive,
         TraceSession.value_factor) = sets[name]  # fmt: skip

    lm = load_causal_lm("smollm2")
    ids = domain_windows(lm.tokenizer, "prose", args.windows, args.tokens, 0)

    def sdpa() -> None:
        with torch.no_grad():
            for w in range(ids.shape[0]):
                lm.model(input_ids=ids[w : w + 1], use_cache=False)

    traces = {}
    for name in sets:
        use(name)
        traces[name] = trace_windows(lm.model, ids, batch_size=1)[0]
    diff = max(float(np.nanmax(np.abs(getattr(traces["base"], f) - getattr(traces["this"], f)))) for f in FIELDS)
    print(f"largest |difference| of the trace's numbers: {diff:.3g}; massive entries equal: "
          f"{traces['base'].massive.equals(traces['this'].massive)}")  # fmt: skip
    wall: dict[str, list[float]] = {"sdpa": [], "base": [], "this": []}
    for _ in range(args.repeats):
        t = time.perf_counter()
        sdpa()
        wall["sdpa"].append(time.perf_counter() - t)
        for name in sets:
            use(name)
            t = time.perf_counter()
            trace_windows(lm.model, ids, batch_size=1)
            wall[name].append(time.perf_counter() - t)
    plain = statistics.median(wall["sdpa"])
    for name, times in wall.items():
        med = statistics.median(times)
        print(f"{name:5s} {med / args.windows:8.3f} s a window  {med / plain:.3f}x a plain forward")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
