"""`attnlab scan`: attention sinks, value drains, massive activations and active-dormant heads of a real causal LM
(spec extreme-tokens §10).

    from attnlab.scan import ScanConfig, scan
    result = scan(ScanConfig(domains=("prose", "code"), samples=2), out="runs/my-scan")
    result.tables["heads"]            # a pandas DataFrame

Importing this package is cheap; torch and transformers load on first use.
"""

from __future__ import annotations

from typing import Any

from attnlab.scan.config import ScanConfig

__all__ = ["ScanConfig", "scan"]


def __getattr__(name: str) -> Any:
    if name == "scan":  # importing the run module pulls in torch and transformers
        from attnlab.scan.run import scan

        return scan
    raise AttributeError(f"module 'attnlab.scan' has no attribute {name!r}")
