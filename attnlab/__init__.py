"""attnlab: the mechanics of attention on toy and real transformers.

Studies live in sub-packages (`extreme`, `real`, `paths`, `consensus`); shared parts are `tasks`, `models`,
`trace`, `train`, `viz`, `runs`, `report` and the CLI (`attnlab.cli`).
"""

__version__ = "0.1.0"
