"""Shared real-model infrastructure: the offline HF loader and the text domains (used by scan, ablate, consensus)."""
