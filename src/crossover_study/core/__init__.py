"""The leaves: paths and files as provenance records them, errors, where a number came
from (host, CPU, git state, Slurm placement), the host's load around a measurement and
the progress lines a person watches. Standard library and PyYAML only; imports nothing
else of the package."""
