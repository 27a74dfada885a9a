"""Spec §9: the simplified mutual-reinforcement model (flow.py), the Adam-vs-SGD residual models (residual.py),
their figures (figures.py) and the `bb theory` run (run.py: `run_theory`)."""
