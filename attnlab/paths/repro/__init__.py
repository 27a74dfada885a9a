"""The reproduction of the attention-paths spec (study paths): every target of the room paths in one folder.

From a target's id (e.g. S6):
  targets.py   its row: the claim, the spec's threshold in words and as checks, the experiments it `needs`, its
               measure and the figure it links (search for `"S6"`)
  runs.py      each experiment it needs: the study commands and config fields, sized per profile (TINY, QUICK,
               FULL), the figure drawn across its runs, and whether it needs a GPU or another experiment first
  measures.py  its measure: the numbers read back from those runs' folders (the keys its checks compare)
  verdicts.py  the claim's verdict function `verdict_<id>(folder) -> (number, met, why)`, where the row judges an
               authors' claim (its note says so)
  checks_theory.py        the theory's unit checks (T1-T9, T11, T15, T16), run with no study command
  checks_sampling.py      the samplers' checks (T12-T14, T17, S4)
  checks_full_profile.py  B2 and the §10 adjudication (B4, SC-H1), full profile only

The figure a row links is drawn by its study run (relative to the folder of the first experiment in `needs`).
`attnlab reproduce` (`attnlab/reproduce/`) collects `targets.TARGETS` and `runs.py`'s tables, runs, judges and
writes them.
"""
