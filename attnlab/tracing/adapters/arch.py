"""Architecture discovery: where a causal LM keeps its decoder blocks, attention output projections and MLPs.

Found by walking the module tree, not from a list of model types: the decoder blocks are the first `nn.ModuleList`
of `num_hidden_layers` modules that each hold an attention module (a child, not a cross-attention, with an output
projection named o_proj, c_proj, out_proj or dense, an `nn.Linear` or GPT-2's transposed `Conv1D`) and an MLP: a
child named mlp, feed_forward, block_sparse_moe, moe or ffn (dense or mixture-of-experts), or else the block's own
`fc2` (OPT keeps fc1/fc2 in the block; fc2's output is the MLP's contribution). Sequential and parallel blocks
(GPT-NeoX, Phi, Falcon, Cohere) look alike from here: every hook acts on a module's output.
Norms are the modules whose class name says Norm (RMSNorm, LayerNorm, OLMo's weightless LayerNorm, ...). A block's
input norm is its first norm child not named `post_*` (those normalise a sublayer's output: OLMo 2 and OPT with
`do_layer_norm_before = False` are post-norm and have none); the final norm is the last norm child of the module
that holds the blocks' `nn.ModuleList` (beside them: `norm`, `ln_f`, `final_layernorm`, OPT's `final_layer_norm`).
Sizes come from the config (`num_attention_heads`, `num_key_value_heads`, `hidden_size`, `max_position_embeddings`
with transformers' attribute aliases) and the attention module (`head_dim` / `head_size`, `sliding_window`, a
`sinks` parameter for learned sink logits). The per-head output matrix W_O^h [d_model, d_head] is read in
`nn.Linear` convention (spec extreme-tokens §10.2); d_head is the value head size, the output projection's input
width / H (multi-head latent attention has wider query/key heads). Cross-attention and GPT-2's
`reorder_and_upcast_attn` are refused; sliding windows, soft-capping and learned sinks are traced.

Issue 40, item 5: a block's attention is the child whose name or class says attention (its output projection may sit
one level down: GPT-Neo's attn.attention.out_proj), never its MLP (GPT-Neo's mlp.c_proj) nor a sequence mixer that
is not softmax attention (`MIXER_WORDS`: Mamba, gated DeltaNet, lightning attention, short convolutions). A hybrid's
stack holds blocks with attention and blocks with such a mixer: `Arch.attention_layers` lists the first kind, and
`attn[l]` is the mixer in the others. `Arch.interface` says whether the attention modules call the function
transformers' `AttentionInterface` names (read from their source, as transformers decides it); those that do not
take the eager fallback (`adapters/eager.py`). A model with no attention layer (Mamba) is refused in one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from attnlab.errors import InputError
from attnlab.tracing.interventions import ModelShape

OUT_PROJ_NAMES = ("o_proj", "c_proj", "out_proj", "dense")
MLP_NAMES = ("mlp", "feed_forward", "block_sparse_moe", "moe", "ffn")
MLP_OUT_NAMES = ("fc2",)  # an MLP written inline in the block (OPT): its last projection
ATTN_WORDS = ("attn", "attention")  # a child whose name or class says so is the block's attention
# a hybrid's sequence mixer that is not softmax attention: state-space layers (Mamba, Jamba, Bamba), RecurrentGemma's
# recurrent block, linear attention (Qwen3-Next's gated DeltaNet `linear_attn`, MiniMax's lightning attention), and
# LFM2's short convolutions; checked before ATTN_WORDS
MIXER_WORDS = ("mamba", "mixer", "ssm", "recurrentblock", "linear_attn", "lightning", "deltanet", "shortconv")


@dataclass
class Arch:
    """Handles on one model's blocks. `out_proj[l]` takes the concatenated heads z [B,T,H·d_h] as its input."""

    kind: str  # "linear" (W_O weight [d_model, H·d_h]) or "conv1d" (GPT-2: its transpose)
    model_type: str
    blocks: list[nn.Module]
    attn: list[nn.Module]
    out_proj: list[nn.Module]
    mlp: list[nn.Module]
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_model: int
    max_positions: int | None  # None: no learned or rotary position limit in the config (e.g. ALiBi)
    windows: list[int | None]  # per layer: the sliding window (keys i−W+1..i), None for full causal attention
    has_sinks: bool  # learned sink logits (a `sinks` parameter per head, gpt-oss)
    input_norms: list[nn.Module | None] = field(default_factory=list)  # per layer: the norm before attention
    final_norm: nn.Module | None = None  # the norm between the last block and the head (None: the model has none)
    # the layers whose block has attention (a hybrid's others mix tokens by a state-space layer, `attn[l]` is then
    # that mixer and `out_proj[l]` its output projection); None: every layer
    attention_layers: list[int] | None = None
    interface: bool = True  # the attention goes through transformers' AttentionInterface (else: the eager fallback)

    @property
    def attention_set(self) -> list[int]:
        """The layers whose block has attention (every layer unless the model is a hybrid)."""
        return list(range(self.n_layers)) if self.attention_layers is None else list(self.attention_layers)

    def check_attention_layer(self, layer: int, what: str) -> None:
        """One-line `InputError` when `what` (a hook point, an intervention) names a layer without attention."""
        if layer not in self.attention_set:
            kind = type(self.attn[layer]).__name__
            raise InputError(
                f"{what}: layer {layer} of this {self.model_type} has no attention (it mixes tokens by {kind}); "
                f"its attention layers are {self.attention_set}"
            )

    @property
    def sliding_window(self) -> int | None:
        """The smallest sliding window of any layer (None: every layer attends to the whole prefix)."""
        ws = [w for w in self.windows if w is not None]
        return min(ws) if ws else None

    def w_o(self, layer: int) -> torch.Tensor:
        """[d_model, H·d_h] output projection of `layer` in Linear convention (y = W z + b)."""
        w = _weight(self.out_proj[layer])
        return w if self.kind == "linear" else w.T

    def w_o_heads(self, layer: int) -> torch.Tensor:
        """[H, d_model, d_h]: W_O^h = W_O[:, h·d_h:(h+1)·d_h]."""
        w = self.w_o(layer).detach()
        return w.reshape(self.d_model, self.n_heads, self.head_dim).permute(1, 0, 2)

    @property
    def shape(self) -> ModelShape:
        """What interventions and head indices are checked against (every layer has attention and an MLP)."""
        return ModelShape(n_layers=self.n_layers, n_heads=self.n_heads, d_model=self.d_model)

    def check_seq_len(self, seq_len: int) -> None:
        """Refuse sequences longer than the context (one-line `InputError`); sliding windows are traced."""
        if self.max_positions is not None and seq_len > self.max_positions:
            raise InputError(
                f"--tokens {seq_len} is longer than the model's context "
                f"(max_position_embeddings = {self.max_positions})"
            )


def _weight(proj: nn.Module) -> torch.Tensor:
    """proj.weight, read from accelerate's offload map when a device map keeps it on the meta device (disk/CPU
    offload loads weights only inside the module's own forward)."""
    w: torch.Tensor = proj.weight  # type: ignore[assignment]
    if w.device.type == "meta":
        hook = getattr(proj, "_hf_hook", None)
        wmap = getattr(hook, "weights_map", None)
        if wmap is None:
            raise InputError("an output projection's weights are on the meta device and no offload map holds them")
        w = wmap["weight"]
    return w


def _out_proj_of(module: nn.Module) -> nn.Module | None:
    """The module's output projection (a child named o_proj, c_proj, out_proj or dense: `nn.Linear` or GPT-2's
    transposed `Conv1D`), or None."""
    for proj_name in OUT_PROJ_NAMES:
        proj = getattr(module, proj_name, None)
        if isinstance(proj, nn.Module) and (isinstance(proj, nn.Linear) or type(proj).__name__ == "Conv1D"):
            return proj
    return None


def _says(name: str, module: nn.Module, words: tuple[str, ...]) -> bool:
    """Whether the child's name or class name contains one of `words` (lower case)."""
    text = f"{name} {type(module).__name__}".lower()
    return any(w in text for w in words)


def _attention_of(block: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """(attention module, its output projection) among the block's children, or None. A child whose name or class
    says attention comes first (its output projection may sit one level down: GPT-Neo's attn.attention.out_proj);
    then any other child with an output projection, except the MLP (GPT-Neo's mlp.c_proj) and sequence mixers that
    are not attention (`MIXER_WORDS`: a hybrid's Mamba layer)."""
    children = [
        (n, c) for n, c in block.named_children() if "cross" not in n and not getattr(c, "is_cross_attention", False)
    ]
    for name, child in children:
        if _says(name, child, ATTN_WORDS) and not _says(name, child, MIXER_WORDS):
            for mod in (child, *child.children()):
                proj = _out_proj_of(mod)
                if proj is not None:
                    return mod, proj
    for name, child in children:
        if name in MLP_NAMES or name in MLP_OUT_NAMES or _says(name, child, MIXER_WORDS):
            continue
        proj = _out_proj_of(child)
        if proj is not None:
            return child, proj
    return None


def mixer_of(block: nn.Module) -> nn.Module | None:
    """A block's sequence mixer that is not softmax attention (a child whose name or class says one of
    `MIXER_WORDS`: a hybrid's state-space, recurrent, linear-attention or convolution layer), or None."""
    for name, child in block.named_children():
        if _says(name, child, MIXER_WORDS):
            return child
    return None


def mlp_of(block: nn.Module) -> nn.Module | None:
    """The module whose output is the block's MLP contribution (see the module docstring), or None."""
    for n in (*MLP_NAMES, *MLP_OUT_NAMES):
        mod = getattr(block, n, None)
        if isinstance(mod, nn.Module):
            return mod
    return None


def is_norm(module: nn.Module) -> bool:
    """A normalisation module: torch's LayerNorm / RMSNorm or a class whose name says Norm (HF's RMSNorms)."""
    return isinstance(module, (nn.LayerNorm, nn.RMSNorm)) or "norm" in type(module).__name__.lower()


def input_norm_of(block: nn.Module, config: Any = None) -> nn.Module | None:
    """The norm a pre-norm block applies to its input x [B, T, d] before attention (for a parallel block with one
    norm, the norm of both sublayers): its first norm child not named `post_*`; None for a post-norm block."""
    if getattr(config, "do_layer_norm_before", True) is False:  # OPT-350m: the block's norms follow its sublayers
        return None
    for name, child in block.named_children():
        if is_norm(child) and not name.startswith("post"):
            return child
    return None


def stack_owner(model: nn.Module, blocks: list[nn.Module]) -> nn.Module:
    """The module whose child `nn.ModuleList` holds the decoder blocks (its final norm sits beside them)."""
    for mod in model.modules():
        for child in mod.children():
            if isinstance(child, nn.ModuleList) and len(child) and child[0] is blocks[0]:
                return mod
    raise InputError(f"{type(model).__name__}: no module holds the decoder blocks")


def final_norm_of(model: nn.Module, blocks: list[nn.Module]) -> nn.Module | None:
    """The norm applied to the last block's output [B, T, d] before the head: the last norm child of the module
    holding the blocks (after an embedding norm, if the model has one), None if it has none."""
    norms = [c for c in stack_owner(model, blocks).children() if is_norm(c)]
    return norms[-1] if norms else None


def _decoder_blocks(model: nn.Module, n_layers: int) -> list[nn.Module] | None:
    """The first `nn.ModuleList` of `n_layers` blocks that each hold an MLP and an attention module or (a hybrid:
    Jamba) a sequence mixer that is not attention (`mixer_of`), at least one block holding attention."""
    for _, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) == n_layers and n_layers > 0:
            attn = [_attention_of(b) is not None for b in mod]
            mixing = all(a or mixer_of(b) is not None for a, b in zip(attn, mod, strict=True))
            if any(attn) and mixing and all(mlp_of(b) is not None for b in mod):
                return list(mod)
    return None


def _layer_modules(block: nn.Module) -> tuple[nn.Module, nn.Module]:
    """(attention or, in a hybrid's other blocks, the sequence mixer; its output projection or itself)."""
    found = _attention_of(block)
    if found is not None:
        return found
    mixer: Any = mixer_of(block)
    return mixer, _out_proj_of(mixer) or mixer


def uses_interface(attn_class: type[nn.Module]) -> bool:
    """Whether an attention class's forward calls the function transformers' `AttentionInterface` names
    (`ALL_ATTENTION_FUNCTIONS`), read from its source as transformers itself decides whether a model can switch its
    attention; True when the source cannot be read (the traced forward then checks that every layer went through).
    Reading source costs ~1 ms (Python's tokenizer): `get_arch` asks once per distinct class, not per layer."""
    import inspect

    try:
        code = inspect.getsource(attn_class.forward)
    except (OSError, TypeError):
        return True
    return "ALL_ATTENTION_FUNCTIONS" in code or "attention_interface" in code


def _no_attention(model: nn.Module, mtype: str) -> str:
    """The one-line refusal of a model with no decoder blocks found: no attention at all (Mamba), or unknown."""
    mods = list(model.named_modules())
    if any(_says(n, m, MIXER_WORDS) for n, m in mods) and not any(
        _says(n, m, ATTN_WORDS) and not _says(n, m, MIXER_WORDS) and _out_proj_of(m) is not None for n, m in mods
    ):
        return (
            f"{mtype} has no attention layer (its blocks mix tokens by a state-space layer); attnlab traces attention"
        )
    return (
        f"unsupported architecture {type(model).__name__} (model_type {mtype!r}): no decoder blocks "
        f"with an attention module (output projection {' / '.join(OUT_PROJ_NAMES)}) and an MLP "
        f"({' / '.join(MLP_NAMES + MLP_OUT_NAMES)}) found"
    )


def _refuse_unsupported(model: nn.Module, cfg: Any, mtype: str) -> None:
    """One-line errors for attention this tracer would get wrong."""
    if getattr(cfg, "is_encoder_decoder", False):
        raise InputError(f"{mtype} is an encoder-decoder model; attnlab traces decoder-only causal LMs")
    if getattr(cfg, "add_cross_attention", False):
        raise InputError(f"{mtype} with cross-attention is not a decoder-only causal LM")
    if getattr(cfg, "reorder_and_upcast_attn", False):
        raise InputError(f"{mtype}: reorder_and_upcast_attn is not supported")


def get_arch(model: nn.Module) -> Arch:
    """Inspect `model` (a transformers causal LM) or raise a one-line InputError naming what is unsupported."""
    cfg: Any = model.config
    mtype = getattr(cfg, "model_type", type(model).__name__)
    _refuse_unsupported(model, cfg, mtype)
    n_layers = getattr(cfg, "num_hidden_layers", None)
    blocks = _decoder_blocks(model, int(n_layers)) if isinstance(n_layers, int) else None
    if blocks is None:
        raise InputError(_no_attention(model, mtype))
    found = [_layer_modules(b) for b in blocks]
    attn = [f[0] for f in found]
    out_proj = [f[1] for f in found]
    layers = [l for l, b in enumerate(blocks) if _attention_of(b) is not None]
    first = layers[0]
    n_heads, n_kv, head_dim, d_model = _sizes(cfg, attn[first], mtype, out_proj[first])
    max_pos = getattr(cfg, "max_position_embeddings", None)
    return Arch(
        kind="linear" if isinstance(out_proj[first], nn.Linear) else "conv1d",
        model_type=mtype,
        blocks=blocks,
        attn=attn,
        out_proj=out_proj,
        mlp=[mlp_of(b) for b in blocks],  # type: ignore[misc]
        n_layers=len(blocks),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        d_model=d_model,
        max_positions=int(max_pos) if max_pos is not None else None,
        windows=[_window_of(a, cfg) if l in layers else None for l, a in enumerate(attn)],
        has_sinks=any(isinstance(getattr(attn[l], "sinks", None), nn.Parameter) for l in layers),
        input_norms=[input_norm_of(b, cfg) for b in blocks],
        final_norm=final_norm_of(model, blocks),
        attention_layers=None if len(layers) == len(blocks) else layers,
        interface=all(uses_interface(c) for c in {type(attn[l]) for l in layers}),
    )


def _sizes(cfg: Any, attn: nn.Module, mtype: str, proj: nn.Module) -> tuple[int, int, int, int]:
    """(H, H_kv, d_h, d_model) from the config, with the attention module's own head size when it has one. d_h is
    the head size of the values, which the output projection reads: its input width / H where that divides (multi-head
    latent attention, DeepSeek-V2/V3 and Kimi-K2, has value heads of `v_head_dim` and query/key heads wider)."""
    n_heads = int(cfg.num_attention_heads)
    groups = getattr(attn, "num_key_value_groups", None)
    own_kv = getattr(attn, "num_key_value_heads", None) or getattr(attn, "num_kv_heads", None)
    # the attention module knows its KV heads; configs may carry an unused num_key_value_heads (GPT-2, OPT)
    n_kv = int(n_heads // groups if groups else own_kv or n_heads)
    d_model = int(cfg.hidden_size)
    own = getattr(attn, "head_dim", None) or getattr(attn, "head_size", None)
    head_dim = int(own or getattr(cfg, "head_dim", None) or d_model // n_heads)
    w = getattr(proj, "weight", None)
    width = None if not isinstance(w, torch.Tensor) else w.shape[1] if isinstance(proj, nn.Linear) else w.shape[0]
    if width is not None and width % n_heads == 0:
        head_dim = int(width // n_heads)
    if n_heads % n_kv:
        raise InputError(f"{mtype}: {n_heads} query heads are not a multiple of {n_kv} KV heads")
    return n_heads, n_kv, head_dim, d_model


def _window_of(attn: nn.Module, cfg: Any) -> int | None:
    """The sliding window of one attention module (its own attribute, else the config's), None if full."""
    w: Any = None
    if hasattr(attn, "sliding_window"):
        w = attn.sliding_window
    elif getattr(cfg, "use_sliding_window", True) and not getattr(cfg, "layer_types", None):
        w = getattr(cfg, "sliding_window", None)
    return int(w) if isinstance(w, int) and w > 0 else None
