"""The toy transformer and the Bigram-Backcopy task (corpus, bigram law, batches) that the bb study, series,
the notebook API and the toy trace adapter all use."""
