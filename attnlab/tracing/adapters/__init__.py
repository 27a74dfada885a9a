"""Trace adapters: how each kind of model feeds the one `TraceRecorder` and compiles the intervention values
(`toy` for attnlab's own transformer's named hook points, `hf` for transformers causal LMs)."""
