"""Big jobs split into Ray tasks: `parallel_map` runs independent chunks of one computation (the consensus phase
diagram's beta chunks, for instance) on a local Ray instance or an existing cluster, in order.

Each chunk runs in its own worker process with one torch thread per CPU Ray gives it, so the numbers are those of
the single-process computation done chunk by chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def parallel_map(
    fn: Callable[..., Any], items: Sequence[tuple], *, workers: int = 0, address: str | None = None
) -> list[Any]:
    """[fn(*item) for item in items], each a Ray task. `address`: a cluster to join; else a local instance with
    `workers` CPUs (0: all). `fn` must be a module-level function (workers import it)."""
    import ray

    started = not ray.is_initialized()
    if started:
        if address:
            ray.init(address=address, log_to_driver=False, include_dashboard=False)
        else:
            ray.init(num_cpus=workers or None, log_to_driver=False, include_dashboard=False)
    try:
        task = ray.remote(num_cpus=1)(fn)
        return ray.get([task.remote(*item) for item in items])
    finally:
        if started:
            ray.shutdown()
