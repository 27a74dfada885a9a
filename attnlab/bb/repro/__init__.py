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
"""
