"""`BatchStage`: one batch's per-layer rows held until the batch ends, so that the recorder's float64 bookkeeping runs
as a few operations over every layer at once instead of a dozen per layer (issue 23).

A traced forward hands the recorder, per layer, a few [B,H,T] rows (the key-0 weights A_i0, the logit statistics
s_i0 and mean_{1≤j≤i−1} s_ij, the value norms [B,T,H]). Each row is copied, as it is (fp32), into a [L, ...] buffer
kept between batches; `take` returns the layers recorded and their rows in float64. The sums, the per-sequence
sink scores and the grouping by query token then cost what one layer's cost before (measured in a SmolLM2 scan at
T = 512: benchmarks/RESULTS.md). Memory: L·B·H·T fp32 per name, the size of the recorder's own accumulators.
"""

from __future__ import annotations

import numpy as np
import torch

from attnlab.errors import AttnlabError


class BatchStage:
    """Per-batch buffers {name: [L, *row_shape] fp32 (float64 for float64 rows)} on `device` (the recorder's: the
    cpu, or the accelerator its accumulators live on), and which layers each holds."""

    def __init__(self, n_layers: int, device: torch.device | None = None) -> None:
        self.L = n_layers
        self.device = torch.device("cpu") if device is None else device
        self._buf: dict[str, torch.Tensor] = {}
        self._seen: dict[str, list[int]] = {}
        self._pending: torch.device | None = None  # a CUDA device with copies into the buffers still in flight

    def reset(self) -> None:
        """Start a batch: no layer is held (the buffers are kept for the next batch of the same shape)."""
        self._seen = {name: [] for name in self._buf}

    def put(self, name: str, layer: int, row: torch.Tensor) -> None:
        """Hold `row` (any shape, any device; copied to a fp32 buffer on the stage's device) as layer `layer`'s
        `name`. A row already on the stage's device is copied there (no transfer, no wait); from a CUDA device to a
        cpu stage the copy goes into pinned memory without waiting for the device (`take` waits for it), so that
        the layers' kernels keep the device busy."""
        dtype = torch.float64 if row.dtype == torch.float64 else torch.float32  # float64 rows stay exact
        cuda = row.device.type == "cuda" and self.device.type == "cpu"
        buf = self._buf.get(name)
        if (
            buf is None
            or buf.shape[1:] != row.shape
            or buf.dtype != dtype
            or (buf.is_pinned() != cuda and self.device.type == "cpu")
        ):
            buf = torch.empty((self.L, *row.shape), dtype=dtype, device=self.device, pin_memory=cuda)
            self._buf[name] = buf
        seen = self._seen.setdefault(name, [])
        if layer in seen:
            raise AttnlabError(f"layer {layer}: {name} recorded twice in one batch")
        if cuda:  # pragma: no cover - CUDA: tests/gpu
            buf[layer].copy_(row.detach().to(dtype), non_blocking=True)
            self._pending = row.device
        else:
            buf[layer].copy_(row.detach())  # same device: an on-device copy, no synchronisation
        seen.append(layer)

    def take(self, name: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(layers [n] int64 in recording order, their rows [n, *row_shape] float64), or None when none was held;
        the name is then empty until the next `put`."""
        seen = self._seen.get(name)
        if not seen:
            return None
        if self._pending is not None:  # pragma: no cover - CUDA: tests/gpu
            torch.cuda.synchronize(self._pending)
            self._pending = None
        self._seen[name] = []
        buf = self._buf[name]
        layers = torch.tensor(seen, dtype=torch.long)
        if seen == list(range(self.L)):
            return layers, buf.double()
        return layers, buf[layers.to(buf.device)].double()


def token_accumulator(vocab_size: int, n_layers: int, n_heads: int) -> torch.Tensor:
    """[V,L,H] float64 zeros for sums grouped by query token, token-major: numpy's zeros come from calloc, whose
    pages the system zeroes only when first touched, so a trace touches ~2 KiB per distinct token it sees (SmolLM2:
    ~8 MiB for 8 windows of 512) instead of writing 106 MiB of zeros ([L,H,V]) at every `attnlab.trace` call."""
    return torch.from_numpy(np.zeros((max(vocab_size, 1), n_layers, n_heads)))


def add_by_token(acc: torch.Tensor, layers: torch.Tensor, rows: torch.Tensor, tok: torch.Tensor) -> None:
    """acc [V,L,H] (`token_accumulator`) += rows [n,B,H,C] grouped by the query's token tok [B,C], for the n layers
    `layers`: in place, touching only the rows of each batch row's tokens."""
    every = layers.numel() == acc.shape[1] and layers.tolist() == list(range(acc.shape[1]))
    for b in range(rows.shape[1]):
        if every:
            acc.index_add_(0, tok[b], rows[:, b].permute(2, 0, 1))
        else:
            for i, layer in enumerate(layers.tolist()):
                acc[:, layer].index_add_(0, tok[b], rows[i, b].transpose(0, 1))


def by_token(acc: torch.Tensor, counts: np.ndarray) -> np.ndarray:
    """[L,H,V] means acc [V,L,H] / counts [V] where a token was seen, NaN elsewhere (only seen columns divided)."""
    V, L, H = acc.shape
    out = np.full((L, H, V), np.nan)
    seen = np.flatnonzero(counts > 0)
    out[:, :, seen] = (acc.numpy()[seen] / counts[seen, None, None]).transpose(1, 2, 0)
    return out
