"""Tasks: character corpora, vocabularies, bigram statistics and the Bigram-Backcopy sampler."""

from attnlab.tasks.bb import BBTask, build_bb_task
from attnlab.tasks.corpus import Vocabulary, build_vocabulary, load_corpus

__all__ = ["BBTask", "build_bb_task", "Vocabulary", "build_vocabulary", "load_corpus"]
