"""What a run folder records of where it ran: the git SHA, the versions, the config hash and the device."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.runs.io import to_jsonable


def git_sha() -> str | None:
    """The current git commit of the attnlab checkout, if any."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).resolve().parent
        )
        return out.stdout.strip() or None
    except Exception:  # noqa: BLE001 - no git is fine
        return None


def environment_manifest() -> dict:
    """Versions of Python and the main libraries, the platform and the git SHA."""
    from importlib.metadata import PackageNotFoundError, version

    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "numpy": np.__version__,
        "git_sha": git_sha(),
        "created": _dt.datetime.now().isoformat(timespec="seconds"),
    }
    # numba and Ray are extras (`attnlab[fast]`, `attnlab[sweep]`): listed only where installed, so a manifest without
    # numba comes from a run whose cpu statistics took the pure-torch path (`Trace.host_kernels`)
    for package in ("torch", "transformers", "scipy", "numba", "ray", "attnlab"):
        try:  # read from the installed metadata: importing transformers just for its version takes seconds
            info[package] = version(package)
        except PackageNotFoundError:
            pass
    return info


def config_hash(config: Any) -> str:
    """A stable 16-hex-digit hash of a config (its JSON form with sorted keys)."""
    text = json.dumps(to_jsonable(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def device_info(config: Any) -> dict:
    """The manifest's record of the device a config computes on ({} for a config without one). Resolving it
    refuses, in one line, `cuda` without CUDA and `cuda` for a command that computes on the cpu only."""
    if not isinstance(getattr(config, "device", None), str):
        return {}
    from attnlab.core.device import describe, resolve

    return describe(resolve(config.device, gpu=getattr(config, "CPU_ONLY", None)))
