"""Posterior sampling of the attention-paths study and what is compared with the theory through it: the targets
and the HMC/MALA sampler (`sampler`, spec §7), MCMC diagnostics (`diagnostics`, §7.3), one sampled point with its
gates (`posterior`), multiple outputs (`outputs`, S8), the entropy-form adjudication (`adjudicate`, §10) and U from
gradient-descent ensembles on the same posterior (`gd_ensemble`, S7). Imports `theory`, never the other way."""
