"""`attnlab view RUN_DIR`: a small local web server for one run folder, bound to 127.0.0.1 only.

It serves the run's files (report.html at `/`; plotly.min.js from the plotly package when the run relies on an
enclosing folder's copy) and, for scan runs, recomputes a head's attention pattern on demand:
`GET /api/pattern?layer=L&head=H` -> {"key": "L.H", "patterns": {domain: [T][T]}, "tokens": {domain: [T]}} on
the first window of each domain (the windows saved in samples.jsonl), so the report's grid can show any head, not
only those kept with `scan --pattern-head`. The model is loaded on the first such request and kept by the server.
"""

from __future__ import annotations

import json
import mimetypes
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from attnlab.errors import AttnlabError, InputError
from attnlab.report import PLOTLY_ASSET

HOST = "127.0.0.1"  # never another interface: the server has no authentication


class PatternSource:
    """Recomputes attention patterns of a scan run's heads from its config and samples (model loaded lazily)."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self._lm: Any = None
        self._lock = threading.Lock()

    def pattern(self, layer: int, head: int) -> dict[str, Any]:
        """{"key", "patterns": {domain: [T][T]}, "tokens": {domain: [T]}} for (layer, head) on first windows."""
        import torch

        from attnlab.configs import config_from_dict
        from attnlab.hf.arch import get_arch
        from attnlab.hf.settings import load_checked
        from attnlab.runs import RunDir, read_jsonl
        from attnlab.scan.config import ScanConfig
        from attnlab.tracing.adapters.hf import trace_windows

        run = RunDir(self.run_dir)
        cfg = config_from_dict(ScanConfig, run.read_config())
        with self._lock:  # one forward at a time; the model is loaded once
            self._lm = self._lm or load_checked(cfg)
            get_arch(self._lm.model).shape.check_head(layer, head)
            first: dict[str, list[int]] = {}
            for r in read_jsonl(run.file("samples.jsonl")):
                first.setdefault(r["domain"], r["token_ids"])
            out: dict[str, Any] = {"key": f"{layer}.{head}", "patterns": {}, "tokens": {}}
            for d, ids in first.items():
                tr, _ = trace_windows(self._lm.model, torch.tensor([ids]), 1, keep_patterns=[(layer, head)], desc="")
                out["patterns"][d] = tr.patterns[f"{layer}.{head}"][0].round(5).tolist()
                out["tokens"][d] = [self._lm.tokenizer.decode([i]) for i in ids]
        return out


def make_handler(run_dir: Path, source: PatternSource | None) -> type[BaseHTTPRequestHandler]:
    """A request handler serving `run_dir` (no file outside it) and, with `source`, the pattern API."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet: the CLI prints the address once
            pass

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj).encode(), "application/json")

        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            url = urlparse(self.path)
            if url.path == "/api/pattern":
                return self._pattern(parse_qs(url.query))
            name = url.path.lstrip("/") or "report.html"
            path = (run_dir / name).resolve()
            if path.is_file() and path.is_relative_to(run_dir):
                kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
                return self._send(HTTPStatus.OK, path.read_bytes(), kind)
            if name == PLOTLY_ASSET:  # the run's page refers to an enclosing folder's copy
                from plotly.offline import get_plotlyjs

                return self._send(HTTPStatus.OK, get_plotlyjs().encode(), "text/javascript")
            self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain")

        def _pattern(self, query: dict[str, list[str]]) -> None:
            if source is None:
                return self._json(HTTPStatus.NOT_FOUND, {"error": "this run is not a scan"})
            try:
                layer, head = int(query["layer"][0]), int(query["head"][0])
                self._json(HTTPStatus.OK, source.pattern(layer, head))
            except (KeyError, ValueError):
                self._json(HTTPStatus.BAD_REQUEST, {"error": "give integer layer and head"})
            except AttnlabError as exc:
                self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})

    return Handler


def make_server(run_dir: str | Path, port: int = 0) -> ThreadingHTTPServer:
    """The server for a run folder on 127.0.0.1:`port` (0: a free port); call `serve_forever()` to run it."""
    run_dir = Path(run_dir).resolve()
    if not (run_dir / "report.html").is_file():
        raise InputError(f"{run_dir} has no report.html; give a run folder written by an attnlab command")
    manifest = run_dir / "manifest.json"
    command = json.loads(manifest.read_text()).get("command") if manifest.is_file() else None
    source = PatternSource(run_dir) if command == "scan" else None
    try:
        return ThreadingHTTPServer((HOST, port), make_handler(run_dir, source))
    except OSError as exc:
        raise InputError(f"--port {port}: cannot listen on {HOST} ({exc.strerror})") from None
