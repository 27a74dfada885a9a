"""Trace adapters: how each kind of model feeds the one `TraceRecorder` and applies the intervention values
(`toy` for attnlab's own transformer, `hf` for transformers causal LMs)."""
