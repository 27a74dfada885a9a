"""`attnlab ablate`: the change in next-token loss when heads, MLPs or residual coordinates of a real causal LM are
switched off (spec extreme-tokens §7, §10.5).

    from attnlab.ablate import AblateConfig, ablate
    result = ablate(AblateConfig(heads=((20, 5),), mlps=(11,), samples=2), out="runs/my-ablation")
    result.tables["ablation"]         # a pandas DataFrame

Importing this package is cheap; torch and transformers load on first use.
"""

from __future__ import annotations

from typing import Any

from attnlab.ablate.config import AblateConfig

__all__ = ["AblateConfig", "ablate"]


def __getattr__(name: str) -> Any:
    if name == "ablate":  # importing the run module pulls in torch and transformers
        from attnlab.ablate.run import ablate

        return ablate
    raise AttributeError(f"module 'attnlab.ablate' has no attribute {name!r}")
