"""attnlab: the mechanics of attention on toy and real transformers.

The API a notebook needs. Each study is a sub-package with its configs and run functions, imported on first use:

    import attnlab
    result = attnlab.bb.train(attnlab.bb.TrainConfig(steps=50), out="runs/bb-notebook")
    result.tables["metrics"]          # a pandas DataFrame

Studies: `bb` (Bigram-Backcopy toy models), `scan`, `ablate` and `deploy` (real LLMs; `deploy`: int8 activations
and sliding-window KV), `series` (a small HF model trained into a checkpoint series), `consensus` (dynamics on the
sphere), `paths` (attention-path kernels). Shared pieces: `trace` (one trace layer and intervention vocabulary),
`runs` (run folders), `errors`.
"""

from __future__ import annotations

import importlib
from typing import Any

from attnlab.errors import AttnlabError, InputError, NumericalError
from attnlab.runs import RunDir, RunResult

__version__ = "0.1.0"
__all__ = [
    "AttnlabError",
    "InputError",
    "NumericalError",
    "RunDir",
    "RunResult",
    "__version__",
    "bb",
    "scan",
    "ablate",
    "deploy",
    "series",
    "consensus",
    "paths",
    "trace",
]
_LAZY = ("bb", "scan", "ablate", "deploy", "series", "consensus", "paths", "trace")


def __getattr__(name: str) -> Any:
    """Import a study sub-package on first access (`attnlab.bb`), so `import attnlab` stays cheap."""
    if name in _LAZY:
        return importlib.import_module(f"attnlab.{name}")
    raise AttributeError(f"module 'attnlab' has no attribute {name!r}")
