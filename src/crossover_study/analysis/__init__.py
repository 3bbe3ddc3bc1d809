"""From measured tables to findings: the timings tables by concern, their split and join
and their one reader, where the study's wall time went, repeated runs
of a point, environments, the crossover, two runs of a study compared, and the
prediction on a reference machine (numbers only; its sentence is the answers')."""
