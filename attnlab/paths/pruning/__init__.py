"""The gradient-descent network of `paths prune` and what it gives the theory: the network with trainable
query/key heads and its training loop (`gradient_descent`, spec §9.3), head scores from U and the pruning
experiments (`pipeline`, spec §8, §9.3), and its trained attention maps plugged into the theory (`plugin`, S10,
which reads a `paths prune` run). Imports `networks`, `tasks` and `theory`."""
