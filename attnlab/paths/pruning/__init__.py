"""What the gradient-descent network of `paths prune` gives the theory: head scores from U and the pruning
experiments (`pipeline`, spec §8, §9.3), and its trained attention maps plugged into the theory (`plugin`, S10,
which reads a `paths prune` run). Imports `networks`, `tasks` and `theory`."""
