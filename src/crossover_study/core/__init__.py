"""The leaves: paths and files as provenance records them, errors, where a number came
from (host, CPU, git state, Slurm placement), the host's load around a measurement and
the progress lines a person watches, the study's tables and column names
(``columns``), and the step thread that runs a block of steps on a fresh Python stack
(``step_thread``). Standard library and PyYAML only; imports nothing
else of the package."""
