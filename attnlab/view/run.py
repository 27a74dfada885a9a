"""`attnlab view`: serve a run folder until Ctrl-C. It writes no run folder of its own, so this room has no
figures.py or report.py: it serves the report the run already has (docs/design.md)."""

from __future__ import annotations

from collections.abc import Callable

from attnlab.view.config import ViewConfig
from attnlab.view.server import make_server


def serve(config: ViewConfig, on_ready: Callable[[int], None] | None = None) -> None:
    """Serve `config.run_dir` on 127.0.0.1 until interrupted; `on_ready(port)` is called once it listens."""
    server = make_server(config.run_dir, config.port)
    if on_ready is not None:
        on_ready(server.server_address[1])
    try:
        server.serve_forever()
    finally:
        server.server_close()
