"""`make test-numerics`: the tests marked `numerics` under every kernel setting of this CPU (issue 37).

A float result that depends on summation order moves with the kernels torch, MKL, oneDNN and numba pick for the
CPU, and with the thread count. The matrix runs the marked tests in a fresh process per cell:

| setting | environment |
|---|---|
| default | (as the machine gives it) |
| avx2 | ATEN_CPU_CAPABILITY=avx2, MKL_ENABLE_INSTRUCTIONS=AVX2, ONEDNN_MAX_CPU_ISA=AVX2, NUMBA_CPU_NAME=haswell |
| generic | ATEN_CPU_CAPABILITY=default, NUMBA_CPU_NAME=generic |

each with 1 and 2 torch threads (`ATTNLAB_TEST_THREADS`, read by tests/conftest.py). Every `tests.numerics.
assert_close` call logs its worst ratio; the matrix then checks that each "observed" tolerance stays `MARGIN` (10)
times inside every cell's worst case, writes the table of worst cases to `<out>/tolerances.md` and exits non-zero
on a failed cell or a thin margin. One-thread cells run two at a time (one per core); two-thread cells alone.

    python -m tests.numerics_matrix [--out runs/numerics-<time>] [--only default,avx2] [pytest args ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.numerics import MARGIN

SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "NUMBA_CPU_NAME": "haswell",
    },
    "generic": {"ATEN_CPU_CAPABILITY": "default", "NUMBA_CPU_NAME": "generic"},
}
THREADS = (1, 2)
CORES = 2  # CI's machine: one-thread cells run in pairs


@dataclass(frozen=True)
class Cell:
    setting: str
    threads: int

    @property
    def name(self) -> str:
        return f"{self.setting}-{self.threads}t"


def cell_env(cell: Cell, log: Path) -> dict[str, str]:
    """The process environment of one cell: the setting's variables, its thread count and its log file."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_XDIST_WORKER", "ATTNLAB_NUMERICS_LOG")}
    env.update(SETTINGS[cell.setting])
    threads = str(cell.threads)
    env.update(ATTNLAB_TEST_THREADS=threads, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    env.update(NUMBA_NUM_THREADS=threads, ATTNLAB_NUMERICS_LOG=str(log))
    return env


def start(cell: Cell, out: Path, pytest_args: list[str]) -> subprocess.Popen:
    """Start one cell's pytest (marked tests only), its output into `<out>/<cell>.txt`."""
    argv = [sys.executable, "-m", "pytest", "-q", "-m", "numerics", "-p", "no:cacheprovider", *pytest_args]
    stdout = (out / f"{cell.name}.txt").open("w")
    env = cell_env(cell, out / f"{cell.name}.jsonl")
    return subprocess.Popen(argv, env=env, stdout=stdout, stderr=subprocess.STDOUT)


def run_cells(cells: list[Cell], out: Path, pytest_args: list[str]) -> dict[str, tuple[int, float]]:
    """Run every cell within CORES cores at a time; {cell: (exit code, seconds)}."""
    pending, running, done = list(cells), {}, {}
    while pending or running:
        while pending and sum(c.threads for c in running) + pending[0].threads <= CORES:
            cell = pending.pop(0)
            running[cell] = (start(cell, out, pytest_args), time.perf_counter())
            print(f"numerics: {cell.name} started", flush=True)
        time.sleep(0.2)
        for cell, (proc, t0) in list(running.items()):
            if proc.poll() is not None:
                done[cell.name] = (proc.returncode, time.perf_counter() - t0)
                del running[cell]
                tail = (out / f"{cell.name}.txt").read_text().strip().splitlines()[-1:]
                print(f"numerics: {cell.name} exit {proc.returncode} in {done[cell.name][1]:.0f} s: {tail}", flush=True)
    return done


def worst_cases(out: Path, cells: list[Cell]) -> dict[tuple[str, str], dict]:
    """{(test, label): the record with the largest ratio over every cell, plus `cell`}."""
    worst: dict[tuple[str, str], dict] = {}
    for cell in cells:
        log = out / f"{cell.name}.jsonl"
        for line in log.read_text().splitlines() if log.exists() else []:
            rec = dict(json.loads(line), cell=cell.name)
            key = (rec["test"], rec["label"])
            if key not in worst or rec["ratio"] > worst[key]["ratio"]:
                worst[key] = rec
    return worst


def thin_margins(worst: dict[tuple[str, str], dict]) -> list[str]:
    """One line for each observed tolerance whose worst case is within MARGIN of it."""
    return [
        f"{test} [{label}]: worst {rec['err']:.3g} in {rec['cell']} is {rec['ratio']:.3g} of its observed "
        f"tolerance (a margin of {1 / rec['ratio']:.1f}x, under {MARGIN:g}x)"
        for (test, label), rec in sorted(worst.items())
        if rec["kind"] == "observed" and rec["ratio"] * MARGIN > 1.0
    ]


def table(worst: dict[tuple[str, str], dict], cells: list[Cell], cpu: str) -> str:
    """The markdown table of every tolerance's worst case over the matrix."""
    head = [
        f"Worst case of every `assert_close` over the numerics matrix ({', '.join(c.name for c in cells)}) on {cpu}.",
        "",
        "| test | label | kind | atol | rtol | worst error | worst / tolerance | cell |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = [
        f"| {t} | {lab} | {r['kind']} | {r['atol']:.3g} | {r['rtol']:.3g} | {r['err']:.3g} | {r['ratio']:.3g} "
        f"| {r['cell']} |"
        for (t, lab), r in sorted(worst.items())
    ]
    return "\n".join(head + rows) + "\n"


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or the platform's processor string)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown cpu"


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(prog="python -m tests.numerics_matrix", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("runs") / time.strftime("numerics-%Y%m%d-%H%M%S"))
    p.add_argument("--only", default=",".join(SETTINGS), help="comma-separated settings (default: all)")
    p.add_argument("--threads", default="1,2", help="comma-separated torch thread counts (default: 1,2)")
    return p.parse_known_args(argv)


def main(argv: list[str] | None = None) -> int:
    args, pytest_args = parse(argv)
    unknown = [s for s in args.only.split(",") if s not in SETTINGS]
    if unknown:
        print(f"numerics: unknown setting {unknown[0]!r} (known: {', '.join(SETTINGS)})", file=sys.stderr)
        return 2
    if args.out.exists():
        print(f"numerics: {args.out} exists; give a new --out", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True)
    cells = [Cell(s, int(t)) for t in args.threads.split(",") for s in args.only.split(",")]
    t0 = time.perf_counter()
    done = run_cells(cells, args.out, pytest_args)
    worst = worst_cases(args.out, cells)
    (args.out / "tolerances.md").write_text(table(worst, cells, cpu_model()))
    failed = [f"{name} exited {rc} (see {args.out / (name + '.txt')})" for name, (rc, _) in done.items() if rc != 0]
    problems = failed + thin_margins(worst)
    for line in problems:
        print(f"numerics: {line}", file=sys.stderr)
    print(f"numerics: {len(cells)} cells, {len(worst)} tolerances, {time.perf_counter() - t0:.0f} s; "
          f"table in {args.out / 'tolerances.md'}")  # fmt: skip
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
