"""CLI start-up and end-to-end time of `attnlab paths solve` (issue 13: goal <= 3 s end to end).

Each round runs, as fresh subprocesses and interleaved (A, B, C, A, B, C ...):

- A: `attnlab paths solve --out <tmp>` end to end (default task: Markov 4path, N = 10, P = 100);
- B: `attnlab --help` (interpreter + `import attnlab.cli` + building every study's parser);
- C: the import floor: `python -c "import torch, numpy"` (what any command that computes must load).

Prints the medians, A / C and A - C, and the load average before and after. With `--profile` it also runs A once
under cProfile and prints where the time goes (imports by top-level package, figures, computation).

    .venv/bin/python benchmarks/bench_startup.py [--rounds 5] [--threads 2] [--profile]
"""

from __future__ import annotations

import argparse
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def commands(tmp: Path, threads: int) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "paths solve (end to end)": [py, "-m", "attnlab.cli", "paths", "solve", "--threads", str(threads), "--out"],
        "attnlab --help": [py, "-m", "attnlab.cli", "--help"],
        "import torch, numpy": [py, "-c", "import torch, numpy"],
    }


def profile_once(tmp: Path, env: dict[str, str], threads: int) -> None:
    """Run the solve once under cProfile; print cumulative time of the main phases."""
    prof = tmp / "solve.prof"
    cmd = [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "attnlab.cli", "paths", "solve"]
    subprocess.run([*cmd, "--threads", str(threads), "--out", str(tmp / "prof-run")], env=env, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    stats = pstats.Stats(str(prof))
    rows = []
    for (file, _line, func), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((ct, f"{Path(file).parent.name}/{Path(file).name}:{func}"))
    wanted = ("torch/__init__.py:<module>", "stats/__init__.py:<module>", "pandas/__init__.py:<module>",
              "matplotlib/__init__.py:<module>", "paths/run.py:solve", "paths/report.py:write_report",
              "paths/figures.py:solve_figures", "tasks/data.py:build_data", "theory/points.py:theory_point",
              "attnlab/cli.py:build_parser", "attnlab/cli.py:main")  # fmt: skip
    print("cProfile of one `attnlab paths solve` (cumulative seconds, nested phases overlap):")
    for ct, name in sorted(rows, reverse=True):
        if any(name.endswith(w) for w in wanted):
            print(f"  {ct:6.2f} s  {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median reported)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of the solve (default 2)")
    ap.add_argument("--profile", action="store_true", help="also profile one solve with cProfile")
    args = ap.parse_args()
    env = _env(args.threads)
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        cmds = commands(tmp, args.threads)
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for r in range(args.rounds):
            for name, cmd in cmds.items():
                extra = [str(tmp / f"solve-{r}")] if name.startswith("paths solve") else []
                times[name].append(_timed(cmd + extra, env))
        if args.profile:
            profile_once(tmp, env, args.threads)
    load1 = os.getloadavg()
    med = {k: statistics.median(v) for k, v in times.items()}
    for name, v in times.items():
        print(f"{name}: median {med[name]:.2f} s  (all: {', '.join(f'{x:.2f}' for x in v)})")
    a, c = med["paths solve (end to end)"], med["import torch, numpy"]
    print(f"solve / import floor = {a / c:.2f}x; solve - floor = {a - c:.2f} s; goal: solve <= 3 s -> "
          f"{'met' if a <= 3.0 else 'NOT met'}")  # fmt: skip
    print(f"threads {args.threads}; load average before {load0[0]:.2f}, after {load1[0]:.2f}; cpus {os.cpu_count()}")


if __name__ == "__main__":
    main()
