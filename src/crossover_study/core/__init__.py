"""The leaves: paths and files as provenance records them, errors, where a number came
from (host, CPU, git state, Slurm placement), the host's load around a measurement and
the progress lines a person watches, and the study's tables and column names
(``columns``). Standard library and PyYAML only; imports nothing
else of the package."""
