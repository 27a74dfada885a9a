"""The reproduction of the extreme-tokens spec's toy model (study bb): every target of the room bb in one folder.

From a target's id (e.g. R4):
  targets.py   its row: the claim, the spec's threshold in words and as checks, the experiments it `needs`, its
               measure and the figure it links (search for `"R4"`)
  runs.py      each experiment it needs: the study commands and config fields, sized per profile (TINY, QUICK,
               FULL), the figure drawn across its runs, and whether it needs a GPU or another experiment first
  measures.py  its measure: the numbers read back from those runs' folders (the keys its checks compare)
  verdicts.py  the claim's verdict function `verdict_<id>(folder) -> (number, met, why)`, where the row judges an
               authors' claim (its note says so)
  checks_reducers.py  R2's direct computation (the streaming reducers and hook equivalence)

The figure a row links is drawn by its study run (relative to the folder of the first experiment in `needs`).
`attnlab reproduce` (`attnlab/reproduce/`) collects `targets.TARGETS` and `runs.py`'s tables, runs, judges and
writes them.

The bars that `targets.py` (the checks) and `verdicts.py` (the verdict functions) share are defined here, one
constant per concept (issue 39; docs/extreme-tokens.md, "One residual-peak bar"): a layer's residual peak ratio is
ρ_l = ‖Res⟨s⟩‖_l / mean of the other tokens' ‖x^{l+1}‖ after block l, and a model has a peak when max_l ρ_l >
PEAK_RATIO, in every row that speaks of a peak (R9's growth bar, R20, R21, SC-3layer); the spec's literal reading
of R20 ("not above the others": ρ ≤ 1) is SPEC_PEAK_RATIO, shown in R20's row, not judged.
"""

from __future__ import annotations

PEAK_RATIO = 1.5
SPEC_PEAK_RATIO = 1.0
# k_mlp and d of the committed full-profile run's 1-layer model (its subspace measure: 14 of 128 directions hold
# 95 % of the MLP output's energy): R19's chance level k/d for a saved record made before the random draws existed
R19_CHANCE_KD = (14, 128)
