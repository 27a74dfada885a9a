"""Run every study's benchmark script in turn (`make bench`). Each prints its ratios; see benchmarks/RESULTS.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = [
    ["bench_bb.py", "--threads", "2"],
    ["bench_real.py"],
    ["bench_consensus.py"],
    ["bench_paths.py", "--out", "runs/paths-bench"],
]


def main() -> int:
    failed = []
    for script, *args in SCRIPTS:
        print(f"== {script} {' '.join(args)}", flush=True)
        if subprocess.run([sys.executable, str(HERE / script), *args]).returncode != 0:
            failed.append(script)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
