"""What went into a run and came out of it: the manifest (and the paper's), its inputs, the
RO-Crate, its files and its validation with roc-validator (which runs in its own
environment and imports nothing of the package)."""
