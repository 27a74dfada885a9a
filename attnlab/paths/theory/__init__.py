"""The kernel-renormalisation theory of the attention-paths study: the action and its gradient (`action`, spec
§5.1-5.5, with the NumPy mirror `fast`), the saddle-point solver (`solver`, §5.6), the predictor and GP baselines
(`predictor`, §6), scalar renormalisation (`renorm`, S9) and one theory point or a warm-started sweep of them
(`points`). Imports `networks` and `tasks`, never `sampling` or `pruning`."""
