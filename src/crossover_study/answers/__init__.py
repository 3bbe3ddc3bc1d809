"""The report's sentences: the answer to each case's question in measured numbers, the
rows it quotes, how numbers are worded, the regime and "why" sentence (on a GPU, what its
trace says the device did), the remedies, the replicas, and the text of the one-size
check's answer. Never imports the figures (the report notebook composes both)."""
