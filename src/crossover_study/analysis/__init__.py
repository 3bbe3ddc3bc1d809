"""From measured tables to findings: the timings table and its one reader, repeated runs
of a point, environments, the crossover, two runs of a study compared, and the
prediction on a reference machine (numbers only; its sentence is the answers')."""
