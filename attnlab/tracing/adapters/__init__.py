"""Trace adapters: how each kind of model feeds the one `TraceRecorder` and compiles the intervention values
(`toy` for attnlab's own transformer's named hook points, `hf` for transformers causal LMs, `blockwise` for
layer-by-layer passes that run one decoder block at a time)."""
