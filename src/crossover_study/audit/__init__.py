"""A run or the paper recomputed against its manifest: the hashes, the findings and their
report, one check per stage that calls the stage's own function, and the audit that
runs them all."""
