"""Big jobs split into Ray tasks: `parallel_map` runs independent chunks of one computation (the consensus phase
diagram's beta chunks, for instance) on a local Ray instance or an existing cluster, in order.

Each chunk runs in its own worker process with one torch thread per CPU Ray gives it, so the numbers are those of
the single-process computation done chunk by chunk.

`start_ray` is the one place Ray is started (sweeps use it too). A local instance talks to nothing but loopback:
no dashboard, no usage statistics, and Ray's API server (always started, even without the dashboard) looks up
the cloud metadata address (169.254.169.254, metadata.google.internal) through a proxy on a closed loopback port
instead of the network; the node itself listens on 127.0.0.1 (Ray's single-machine mode, which only takes
effect if `ray` was not imported before with other settings). These settings hold only while `ray.init` starts
Ray's processes; the user's proxy settings are given back to the workers. `check_address` probes a cluster
address before Ray is asked to join it, so an address where nothing listens is one line, not a hang.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from attnlab.errors import InputError, check

DEAD_PROXY = "http://127.0.0.1:9"  # the discard port: nothing listens, every request fails at once
LOOPBACK_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
PROXY_VARS = ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY")
CONNECT_TIMEOUT_S = 3.0


def check_address(address: str, what: str = "--address", timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse a Ray address (host:port or ray://host:port) where no server accepts a TCP connection."""
    if address in ("auto", "local"):
        return
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    host = host.strip("[]")
    ok = bool(sep and host and port.isdigit() and 0 < int(port) < 65536)
    check(ok, f"{what} {address!r}: give host:port (or ray://host:port) of a Ray cluster's head")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise InputError(f"{what} {address}: no Ray cluster answers there ({why})") from None


@contextlib.contextmanager
def _ray_start_env(local: bool) -> Iterator[dict[str, str]]:
    """The environment Ray's processes are started with (restored afterwards); yields the workers' proxy vars."""
    saved = {k: os.environ.get(k) for k in ("RAY_USAGE_STATS_ENABLED", LOOPBACK_VAR, *PROXY_VARS)}
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    if local:  # Ray's single-machine mode: read when `ray` is first imported, and by every process Ray starts
        os.environ.update({LOOPBACK_VAR: "0", "http_proxy": DEAD_PROXY, "HTTP_PROXY": DEAD_PROXY})
        for key in ("no_proxy", "NO_PROXY"):
            os.environ.pop(key, None)
    try:
        yield {k: saved[k] or "" for k in PROXY_VARS}  # an empty proxy variable counts as unset
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _keep_signal_handlers() -> Iterator[None]:
    """Put back the Python handlers of SIGTERM and SIGINT that Ray's core worker replaces with its own (which
    dumps a C++ stack trace), so a killed sweep exits like Ctrl-C."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            with contextlib.suppress(ValueError, TypeError):  # not the main thread, or a handler set outside Python
                signal.signal(sig, handler)


def require_ray(what: str) -> None:
    """Refuse in one line, before any work, `what` (a command or option that runs Ray tasks) where Ray is not
    installed: Ray is the optional extra `attnlab[sweep]` (pyproject.toml), not a dependency of the package."""
    import importlib.util

    try:
        found = importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # an import hook that refuses it; `ray` set to None in sys.modules
        found = False
    if not found:
        raise InputError(f"{what} needs Ray, which is not installed: pip install 'attnlab[sweep]'")


def start_ray(address: str | None, num_cpus: int | None) -> Any:
    """`ray` after joining the cluster at `address`, or after starting a loopback-only local instance."""
    require_ray("--address" if address else "a local Ray instance (--workers)")
    if address:
        check_address(address)
    with _ray_start_env(not address) as worker_env, _keep_signal_handlers():
        import ray  # a first import here sees the loopback setting (an earlier one keeps its own)

        try:
            if address:
                ray.init(address=address, log_to_driver=False, include_dashboard=False)
            else:
                ray.init(
                    address="local",
                    num_cpus=num_cpus,
                    log_to_driver=False,
                    include_dashboard=False,
                    runtime_env={"env_vars": worker_env},
                )
        except (ConnectionError, RuntimeError, TimeoutError) as exc:
            where = f"--address {address}" if address else "a local Ray instance"
            raise InputError(f"{where}: Ray did not start ({_first_line(exc)})") from None
    return ray


def joined_ray() -> Any | None:
    """`ray` if this process is already connected to a Ray instance (a Ray task's worker, or a driver that started
    one), else None. Work started from inside a Ray task joins that instance: a second `ray.init` there fails."""
    ray = sys.modules.get("ray")
    return ray if ray is not None and ray.is_initialized() else None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def parallel_map(
    fn: Callable[..., Any], items: Sequence[tuple], *, workers: int = 0, address: str | None = None
) -> list[Any]:
    """[fn(*item) for item in items], each a Ray task. `address`: a cluster to join; else a local instance with
    `workers` CPUs (0: all). `fn` must be a module-level function (workers import it)."""
    require_ray("--address" if address else "--workers")
    import ray

    started = not ray.is_initialized()
    if started:
        start_ray(address, workers or None)
    try:
        task = ray.remote(num_cpus=1)(fn)
        return ray.get([task.remote(*item) for item in items])
    finally:
        if started:
            ray.shutdown()
