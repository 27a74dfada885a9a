"""`attnlab view RUN_DIR`: argparse <-> the local server, nothing else."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "view",
        help="serve a run's report on 127.0.0.1 (scan runs: any head's pattern on demand)",
        description="Serves RUN_DIR's report.html on http://127.0.0.1:PORT/ (this machine only). For a scan "
        "run, clicking a head whose pattern was not saved recomputes it with the run's model. Ctrl-C stops.",
    )
    p.add_argument("run_dir", help="a run folder with report.html")  # str: '' stays empty (Path('') is .)
    p.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000; 0: any free port)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads for recomputed patterns (default 1)")
    p.set_defaults(func=cmd_view, make_config=make_config)


def make_config(args: argparse.Namespace) -> Any:
    from attnlab.view.config import ViewConfig

    return ViewConfig(str(args.run_dir), args.port)


def cmd_view(args: argparse.Namespace) -> int:
    from attnlab.core.clitools import threads
    from attnlab.view.run import serve

    def ready(port: int) -> None:
        print(f"serving {args.run_dir} on http://127.0.0.1:{port}/ (Ctrl-C to stop)", flush=True)

    with threads(args.threads):
        serve(make_config(args), on_ready=ready)
    return 0
