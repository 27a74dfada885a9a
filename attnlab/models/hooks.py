"""Named hook points in the style of TransformerLens: a hook may read or replace the tensor at a point."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Mapping, Sequence, Union

import torch

Hook = Callable[[torch.Tensor, str], Union[torch.Tensor, None]]
HookSpec = Mapping[str, Union[Hook, Sequence[Hook]]]


class HookedModule(torch.nn.Module):
    """Base class: `self.hook(name, x)` runs the hooks registered for `name` (cheap when there are none)."""

    def __init__(self) -> None:
        super().__init__()
        self._hooks: dict[str, list[Hook]] = {}

    def hook(self, name: str, x: torch.Tensor) -> torch.Tensor:
        fns = self._hooks.get(name)
        if not fns:
            return x
        for fn in fns:
            out = fn(x, name)
            if out is not None:
                x = out
        return x

    @contextmanager
    def hooks(self, spec: HookSpec | None) -> Iterator[None]:
        """Temporarily install `spec` ({hook point name: fn or [fns]}); names are checked against `hook_points()`."""
        if not spec:
            yield
            return
        known = set(self.hook_points())
        saved = self._hooks
        merged: dict[str, list[Hook]] = {k: list(v) for k, v in saved.items()}
        for name, fns in spec.items():
            if name not in known:
                from attnlab.errors import AttnlabError

                raise AttnlabError(f"unknown hook point {name!r}; known points look like "
                                   f"{sorted(known)[:4]} ... ({len(known)} in all)")
            merged.setdefault(name, []).extend([fns] if callable(fns) else list(fns))
        self._hooks = merged
        try:
            yield
        finally:
            self._hooks = saved

    def hook_points(self) -> list[str]:
        """Names of the hook points this model offers (subclasses override)."""
        return []
