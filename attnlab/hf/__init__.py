"""Shared real-model infrastructure, used by `scan`, `ablate` and `consensus`: the offline HF loader (`loader`),
text domains (`texts`), architecture discovery (`arch`), head tables and classes (`analysis`), checkpoint series
(`checkpoints`) and the settings and options every real-model command shares (`settings`)."""
