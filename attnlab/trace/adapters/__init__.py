"""Trace adapters: how each model family feeds the one `TraceRecorder` and compiles the one intervention spec
(`toy.py` for the BB toy transformer's named hook points)."""
