"""`attnlab deploy` settings: frozen configs, validated before any work (spec extreme-tokens §14, R23).

Both subcommands share the real-model window fields of `WindowSettings` (model, domains, tokens, samples, seed,
text, prefix, align, batch_size, cache_dir, revision, dtype, device, device_map).
"""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.errors import check, check_choice, check_finite, check_int, names
from attnlab.hf.settings import WindowSettings

QUANT_POLICIES = ("none", "naive", "exclude", "clip")
QUANT_SITES = ("linear", "residual")


@dataclass(frozen=True)
class QuantizeConfig(WindowSettings):
    """Fake per-tensor activation quantisation (`attnlab.deploy._quant`), compared on the same windows.

    policies: "none" (the model as loaded), "naive" (scale from the whole tensor), "exclude" (outlier channels
    kept in full precision, left out of the scale), "clip" (outlier channels left out of the scale and clamped to
    its range). sites: "linear" (the input of every Linear / Conv1D inside the decoder blocks) and/or "residual"
    (the residual stream entering each block). An outlier channel of one window's tensor x [T, d] has a peak
    max_t |x_td| > outlier_ratio × the median channel peak; at most max_outliers per tensor (largest first).
    """

    domains: tuple[str, ...] = ("prose", "code")
    tokens: int = 512
    policies: tuple[str, ...] = QUANT_POLICIES
    sites: tuple[str, ...] = ("linear", "residual")
    bits: int = 8
    outlier_ratio: float = 10.0
    max_outliers: int = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("policies", "sites"):
            object.__setattr__(self, name, names(getattr(self, name), name))
        check(len(self.policies) > 0, "policies: give at least one --policy (none, naive, exclude, clip)")
        check(len(self.sites) > 0, "sites: give at least one --site (linear, residual)")
        for p in self.policies:
            check_choice(p, QUANT_POLICIES, "policy")
        for s in self.sites:
            check_choice(s, QUANT_SITES, "site")
        check(len(set(self.policies)) == len(self.policies), f"policies: {list(self.policies)} repeats a policy")
        check(len(set(self.sites)) == len(self.sites), f"sites: {list(self.sites)} repeats a site")
        check_int(self.bits, 2, "bits", maximum=16)
        object.__setattr__(self, "outlier_ratio", check_finite(self.outlier_ratio, "outlier_ratio", positive=True))
        check_int(self.max_outliers, 1, "max_outliers")


@dataclass(frozen=True)
class SlidingWindowConfig(WindowSettings):
    """Sliding-window attention as a KV-cache policy, with and without the first `sink_tokens` keys kept.

    windows: each W gives two policies, "window W" (query i sees keys i−W+1..i) and "sink+window W" (also keys
    0..sink_tokens−1, StreamingLLM's attention sinks); "full" (causal attention) is the baseline. Position ids
    stay those of the full window (0..T−1).
    """

    domains: tuple[str, ...] = ("prose", "code")
    tokens: int = 1024
    windows: tuple[int, ...] = (256,)
    sink_tokens: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "windows", tuple(self.windows))
        check(len(self.windows) > 0, "windows: give at least one --window W")
        for w in self.windows:
            check_int(w, 1, "window")
            check(
                w <= self.tokens,
                f"window {w} is longer than --tokens {self.tokens}; give a window of at most {self.tokens} keys",
            )
        check(len(set(self.windows)) == len(self.windows), f"windows: {list(self.windows)} repeats a window")
        check_int(self.sink_tokens, 1, "sink_tokens", maximum=self.tokens - 1)
