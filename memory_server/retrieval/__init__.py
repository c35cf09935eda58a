"""Retrieval: what a recall reads (the candidates from the stores and the index, the vocabulary of the
memories) and hands to the I/O-free scoring in memory_server/ranking/, and how its results are packed."""
