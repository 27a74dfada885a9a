"""Tasks of the attention-paths study: the hidden-Markov-chain task and one-shot digit episodes."""
