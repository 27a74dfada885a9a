"""Put runs side by side: `compare(CompareConfig(run_dirs=(...)), out)` and `write_index(folder)`."""

from attnlab.compare.config import CompareConfig
from attnlab.compare.run import compare, write_index

__all__ = ["CompareConfig", "compare", "write_index"]
