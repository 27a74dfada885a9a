"""Spec §9: the simplified mutual-reinforcement model (flow.py), the Adam-vs-SGD residual models (residual.py)
and the `bb theory` computation (simulate.py: `simulate`); figures live in `attnlab.bb.figures`."""
