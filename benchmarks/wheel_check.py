"""The wheel a user installs (issue 40 item 7): built with `python -m build`, installed into a fresh venv that already
holds a torch other than the lock's, it must keep that torch, and `attnlab.trace` must run, with and without numba.

Steps (each prints one line; the last prints the summary as JSON and writes it to WORK/wheel-check.json):

1. a build venv with `build`, which runs `python -m build --outdir WORK/dist` on this checkout (sdist, then the wheel
   from it);
2. a user venv with `torch==TORCH` installed first (2.14.1 by default: a CUDA build, which pip takes from this
   machine's disk; on another machine, whatever torch you name), its version noted;
3. `pip install WORK/dist/attnlab-*.whl`, with the lock's other versions as constraints (`--no-lock`: none, pip
   picks), then checks that torch's version is unchanged, that `pip check` is clean, and, from a folder outside the
   checkout, that `import attnlab` is the wheel's and `attnlab.trace` on a tiny random Llama runs with neither numba
   nor Ray installed (`Trace.host_kernels == "torch"`), and `attnlab sweep` refuses in one line naming
   `pip install 'attnlab[sweep]'`;
4. the wheel again with the `fast` extra: torch still unchanged, `host_kernels == "numba"`, and the same statistics
   as step 3 within the bound of tests/real/test_cpu_kernels.py (rtol 1e-5, atol 1e-6).

It downloads `build`, the build backend and (without a pip cache) attnlab's dependencies, so it is not part of
`make test`, which stays offline: `make wheel-check` runs it.

    .venv/bin/python benchmarks/wheel_check.py [--torch 2.14.1] [--work DIR] [--no-lock]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Runs in the user venv, outside the checkout: prints one JSON line.
PROBE = """
import json, sys, numpy as np, torch
from transformers import LlamaConfig, LlamaForCausalLM
import attnlab
torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=64)
model = LlamaForCausalLM(config).eval()
ids = torch.randint(3, 64, (2, 24), generator=torch.Generator().manual_seed(1))
tr = attnlab.trace(model, ids)
print(json.dumps({"torch": torch.__version__, "attnlab_file": attnlab.__file__, "host_kernels": tr.host_kernels,
                  "numba_imported": "numba" in sys.modules, "ray_imported": "ray" in sys.modules,
                  "sink_score": tr.sink_score_per_sample.tolist(), "resid_norm": tr.resid_norm.tolist()}))
"""
SPEC = 'command = "consensus simulate"\n[base]\nn = 8\n[grid]\nseed = [0, 1]\n'


def _sh(*cmd: str | Path, cwd: Path | None = None) -> str:
    """Run `cmd`; its stdout, or exit with its last lines of output."""
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, env=_env())
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{(out.stdout + out.stderr)[-3000:]}")
    return out.stdout


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return dict(env, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PIP_DISABLE_PIP_VERSION_CHECK="1")


def _venv(path: Path) -> Path:
    """A fresh venv at `path` (from the python that runs this script's base interpreter); its python."""
    _sh(getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--clear", path)
    _sh(path / "bin" / "python", "-m", "pip", "install", "-q", "--upgrade", "pip")
    return path / "bin" / "python"


def _step(text: str, t0: float) -> None:
    print(f"[{time.time() - t0:6.0f} s] {text}", flush=True)


def build_wheel(work: Path, t0: float) -> Path:
    py = _venv(work / "build-venv")
    _sh(py, "-m", "pip", "install", "-q", "build")
    _sh(py, "-m", "build", "--outdir", work / "dist", ROOT)
    wheel = sorted((work / "dist").glob("attnlab-*.whl"))[-1]
    _step(f"built {wheel.name} ({wheel.stat().st_size / 1e6:.2f} MB)", t0)
    return wheel


def _constraints(work: Path, use_lock: bool) -> list[str]:
    """pip's -c arguments: the lock without torch (the user's torch stays), or none."""
    if not use_lock:
        return []
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    path = work / "lock-without-torch.txt"
    path.write_text("\n".join(line for line in lines if not line.startswith("torch==")) + "\n")
    return ["-c", str(path)]


def _probe(py: Path, work: Path) -> dict:
    return json.loads(_sh(py, "-c", PROBE, cwd=work).strip().splitlines()[-1])


def _sweep_refusal(venv: Path, work: Path) -> str:
    (work / "spec.toml").write_text(SPEC)
    out = subprocess.run([str(venv / "bin" / "attnlab"), "sweep", "spec.toml", "--out", "sweep"], cwd=work,
                         capture_output=True, text=True, env=_env())  # fmt: skip
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    ok = out.returncode != 0 and len(lines) == 1 and "pip install 'attnlab[sweep]'" in lines[0]
    if not ok or (work / "sweep").exists():
        sys.exit(f"attnlab sweep without Ray: expected one line naming attnlab[sweep], got:\n{out.stderr[-2000:]}")
    return lines[0]


def _close(a: list, b: list) -> bool:
    import numpy as np

    return bool(np.allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6))  # tests/real/test_cpu_kernels.py


def check(torch_version: str, work: Path, use_lock: bool) -> dict:
    t0 = time.time()
    wheel = build_wheel(work, t0)
    venv = work / "user-venv"
    py = _venv(venv)
    _sh(py, "-m", "pip", "install", "-q", f"torch=={torch_version}")
    before = _sh(py, "-c", "import torch; print(torch.__version__)").strip()
    _step(f"user venv holds torch {before}", t0)
    pip = [py, "-m", "pip", "install", "-q", *_constraints(work, use_lock)]
    _sh(*pip, wheel)
    plain = _probe(py, work)
    _sh(py, "-m", "pip", "check")
    refusal = _sweep_refusal(venv, work)
    _step(f"pip install {wheel.name}: torch {plain['torch']}, host_kernels {plain['host_kernels']}", t0)
    _sh(*pip, f"{wheel}[fast]")
    fast = _probe(py, work)
    _step(f"pip install {wheel.name}[fast]: torch {fast['torch']}, host_kernels {fast['host_kernels']}", t0)
    result = {
        "wheel": wheel.name,
        "torch_before": before,
        "torch_after_wheel": plain["torch"],
        "torch_after_fast_extra": fast["torch"],
        "attnlab_from_wheel": plain["attnlab_file"].startswith(str(venv)),
        "plain": {k: plain[k] for k in ("host_kernels", "numba_imported", "ray_imported")},
        "fast": {k: fast[k] for k in ("host_kernels", "numba_imported", "ray_imported")},
        "same_stats_numba_vs_torch": _close(plain["sink_score"], fast["sink_score"])
        and _close(plain["resid_norm"], fast["resid_norm"]),
        "sweep_without_ray": refusal,
        "lock_constraints": use_lock,
        "seconds": round(time.time() - t0),
    }
    result["ok"] = (
        before == plain["torch"] == fast["torch"]
        and result["attnlab_from_wheel"]
        and plain["host_kernels"] == "torch"
        and not plain["numba_imported"]
        and not plain["ray_imported"]
        and fast["host_kernels"] == "numba"
        and result["same_stats_numba_vs_torch"]
    )
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--torch", default="2.14.1", help="the torch the user venv holds before attnlab (default 2.14.1)")
    ap.add_argument("--work", type=Path, default=None, help="working folder (default: a temporary one, removed)")
    ap.add_argument("--no-lock", action="store_true", help="no constraints: pip picks attnlab's dependencies")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="attnlab-wheel-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        result = check(args.torch, work.resolve(), not args.no_lock)
        (work / "wheel-check.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
