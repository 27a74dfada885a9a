"""Real pretrained causal LMs (spec extreme-tokens §10): offline loader, text domains, streaming attention traces,
sink / active-dormant head scans and head, MLP and residual-coordinate ablations."""
