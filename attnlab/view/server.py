"""`attnlab view RUN_DIR`: a small local web server for one run folder, bound to 127.0.0.1 only.

It serves the run's files (report.html at `/`; plotly.min.js from the plotly package when the run relies on an
enclosing folder's copy) and, for scan runs, recomputes a head's attention pattern on demand:
`GET /api/pattern?layer=L&head=H` -> {"key": "L.H", "patterns": {domain: [T][T], masked cells null}, "tokens": ...} on
the first window of each domain (the windows saved in samples.jsonl), so the report's grid can show any head, not
only those kept with `scan --pattern-head` (`&domain=D` asks for one domain). The model is loaded on the first
such request and kept by the server. A bad request gets a 400 naming the parameter that is wrong. Every request
whose `Host` header is not 127.0.0.1, localhost or [::1] (on the server's port) is refused with 403, so that a web
page cannot reach the server through DNS rebinding.
"""

from __future__ import annotations

import json
import mimetypes
import re
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from attnlab.errors import AttnlabError, InputError, check, check_choice
from attnlab.reports.attention import masked_pattern
from attnlab.reports.page import PLOTLY_ASSET, rounded

HOST = "127.0.0.1"  # never another interface: the server has no authentication


ALLOWED_HOSTS = ("127.0.0.1", "localhost", "[::1]")  # the Host names a request may use (DNS rebinding guard)
PATTERN_PARAMS = ("layer", "head", "domain", "window")
PATTERN_USAGE = "ask /api/pattern?layer=L&head=H (optionally &domain=D&window=W, W counted from 0)"


def host_allowed(host: str | None, port: int) -> bool:
    """Whether a request's Host header names this machine (127.0.0.1, localhost or [::1], with no port or `port`):
    a page on another site that rebinds its DNS name to 127.0.0.1 still sends its own name, and is refused."""
    host = (host or "").strip().lower()
    name, port_text = host, ""
    if ":" in host and not host.endswith("]"):
        name, _, port_text = host.rpartition(":")
    return name in ALLOWED_HOSTS and port_text in ("", str(port))


def parse_pattern_query(query: dict[str, list[str]]) -> tuple[int, int, str | None, int]:
    """(layer, head, domain, window) of a pattern request, or an InputError naming the parameter that is wrong."""
    unknown = sorted(set(query) - set(PATTERN_PARAMS))
    if unknown:
        raise InputError(f"unknown parameter '{unknown[0]}'; {PATTERN_USAGE}")
    for name, values in query.items():
        check(len(values) == 1, f"parameter '{name}' is given {len(values)} times; give it once")
    numbers = []
    for name in ("layer", "head", "window"):
        check(name in query or name == "window", f"missing parameter '{name}'; {PATTERN_USAGE}")
        text = query.get(name, ["0"])[0]
        check(re.fullmatch(r"-?[0-9]{1,9}", text) is not None, f"{name} must be an integer, got {text!r}")
        numbers.append(int(text))
    return numbers[0], numbers[1], query.get("domain", [None])[0], numbers[2]


class PatternSource:
    """Recomputes attention patterns of a scan run's heads from its config and samples (model loaded lazily)."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self._lm: Any = None
        self._lock = threading.Lock()

    def windows(self, domain: str | None = None, window: int = 0) -> dict[str, list[int]]:
        """domain -> token ids of its saved window number `window` (from 0; only `domain`'s when given)."""
        from attnlab.runs import read_jsonl

        every: dict[str, list[list[int]]] = {}
        for r in read_jsonl(self.run_dir / "samples.jsonl"):
            check(
                isinstance(r, dict) and "domain" in r and "token_ids" in r, f"{self.run_dir}/samples.jsonl is corrupt"
            )
            every.setdefault(r["domain"], []).append(r["token_ids"])
        check(bool(every), f"{self.run_dir} saved no windows (samples.jsonl is missing or empty); rerun the scan")
        if domain is not None:
            every = {check_choice(domain, sorted(every), "domain"): every[domain]}
        fewest = min(len(w) for w in every.values())
        check(0 <= window < fewest, f"window must be in [0, {fewest - 1}] (the scan saved {fewest}), got {window}")
        return {d: w[window] for d, w in every.items()}

    def pattern(self, layer: int, head: int, domain: str | None = None, window: int = 0) -> dict[str, Any]:
        """{"key", "window", "patterns": {domain: [T][T]}, "tokens": {domain: [T]}} for (layer, head) on window
        number `window` of each domain (0: the first, whose patterns the scan saves)."""
        import torch

        from attnlab.hf.loader import load_checked
        from attnlab.runs import RunDir
        from attnlab.runs.configs import config_from_dict
        from attnlab.scan.config import ScanConfig
        from attnlab.tracing.adapters.hf import trace_windows

        cfg = config_from_dict(ScanConfig, RunDir(self.run_dir).read_config())
        windows = self.windows(domain, window)  # a bad run folder, domain or window is refused before loading
        with self._lock:  # one forward at a time; the model is loaded once
            self._lm = self._lm or load_checked(cfg)
            self._lm.arch.shape.check_head(layer, head)
            out: dict[str, Any] = {"key": f"{layer}.{head}", "window": window, "patterns": {}, "tokens": {}}
            for d, ids in windows.items():
                tr, _ = trace_windows(self._lm.model, torch.tensor([ids]), 1, keep_patterns=[(layer, head)], desc="")
                out["patterns"][d] = rounded(masked_pattern(tr.patterns[f"{layer}.{head}"][0]), 5)  # masked: null
                out["tokens"][d] = [self._lm.tokenizer.decode([i]) for i in ids]
        return out


def make_handler(
    run_dir: Path, source: PatternSource | None, command: str | None = None
) -> type[BaseHTTPRequestHandler]:
    """A request handler serving `run_dir` (no file outside it) and, with `source`, the pattern API. Requests
    whose Host header is not this machine are refused (403)."""

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
            host = self.headers.get("Host")
            if not host_allowed(host, self.connection.getsockname()[1]):
                body = f"refused: Host {host!r} is not 127.0.0.1, localhost or [::1] on this port".encode()
                return self._send(HTTPStatus.FORBIDDEN, body, "text/plain")
            url = urlparse(self.path)
            if url.path == "/api/pattern":
                return self._pattern(parse_qs(url.query, keep_blank_values=True))
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
                what = f"a run of `attnlab {command}`" if command else "not an attnlab scan run"
                message = f"{run_dir.name} is {what}: only scan runs recompute patterns"
                return self._json(HTTPStatus.NOT_FOUND, {"error": message})
            try:
                self._json(HTTPStatus.OK, source.pattern(*parse_pattern_query(query)))
            except AttnlabError as exc:
                self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            except Exception as exc:  # noqa: BLE001 - the page shows the message instead of hanging
                self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(exc).__name__}: {exc}"})

    return Handler


def make_server(run_dir: str | Path, port: int = 0) -> ThreadingHTTPServer:
    """The server for a run folder on 127.0.0.1:`port` (0: a free port); call `serve_forever()` to run it."""
    from attnlab.runs import read_json

    run_dir = Path(run_dir).resolve()
    if not (run_dir / "report.html").is_file():
        raise InputError(f"{run_dir} has no report.html; give a run folder written by an attnlab command")
    manifest = read_json(run_dir / "manifest.json", "run manifest") if (run_dir / "manifest.json").exists() else {}
    command = manifest.get("command") if isinstance(manifest, dict) else None
    source = PatternSource(run_dir) if command == "scan" else None
    try:
        return ThreadingHTTPServer((HOST, port), make_handler(run_dir, source, command))
    except OSError as exc:
        raise InputError(f"--port {port}: cannot listen on {HOST} ({exc.strerror})") from None
