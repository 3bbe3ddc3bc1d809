"""``python -m crossover_study``: the ``crossover-study`` command line
(:mod:`crossover_study.cli`)."""

import sys

from crossover_study.cli import main

if __name__ == "__main__":
    sys.exit(main())
