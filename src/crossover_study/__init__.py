"""crossover-study: when is the GPU, the TPU or a multi-GPU node faster than the CPU?

The package is a house of subpackages by stage, read bottom up. A package imports only
from the packages on the floors below its own, never from above nor from a sibling on
its own floor, and the imports form no cycle, between packages or inside one (counting
those inside functions; ``tests/test_layers.py`` checks all three and that every module
lies in a package of :data:`LAYERS`). The floors, bottom first:

0. ``core``: paths, files, errors, where a number came from, the host's load, progress
   lines; ``plugin``: the contract of a user's own case (users import it by name);
1. ``study``: cases, the point spec, which variant applies and which program runs, the
   study file, its config and the points and jobs it expands into;
2. ``stepmodel``: the step counted, the machine's rates, the replays and the step-time
   model; ``workloads``: the programs that are timed (they never import the model);
3. ``measure``: one measuring job, from pinned threads to its table and probe record;
4. ``analysis``: the timings table, repeats, environments, the crossover, runs compared,
   a prediction on a reference machine;
5. ``answers``: the report's sentences; ``figures``: the report's and the paper's figures
   (siblings: the report notebook composes them);
6. ``provenance``: the manifest and the RO-Crate;
7. ``audit``: a run or the paper recomputed against its manifest;
8. ``reference``: the GPU reference run, its bundle and rehearsal, an archive imported,
   a run frozen; ``quickcheck``: the one-size check (``crossover-study check``);
9. ``cli``: the ``crossover-study`` command;
10. ``__main__``: ``python -m crossover_study``, the same command.

Each package's ``__init__`` says what it is; callers import a name from the module where
it lives. An import inside a function is there for a heavy package (a framework,
matplotlib) or for start-up time (the workflow imports some modules while it is parsed,
the GPU run some before its bundle is installed), never to dodge a cycle. No library
module has an ``if __name__ == "__main__":`` block: every command is a subcommand of
``crossover-study`` (:mod:`crossover_study.cli`).
"""

#: Floor of every package and top-level module (its first dotted name below
#: ``crossover_study``), bottom first; see the module docstring. Packages on one floor
#: are siblings and import nothing of each other.
LAYERS: dict[str, int] = {
    "core": 0,
    "plugin": 0,
    "study": 1,
    "stepmodel": 2,
    "workloads": 2,
    "measure": 3,
    "analysis": 4,
    "answers": 5,
    "figures": 5,
    "provenance": 6,
    "audit": 7,
    "reference": 8,
    "quickcheck": 8,
    "cli": 9,
    "__main__": 10,
}
