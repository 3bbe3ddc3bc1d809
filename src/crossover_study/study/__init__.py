"""What a study is: the case registry, the point spec and its rows, which variant applies
where and which program runs, the study file and its config, the points and jobs it
expands into with the timing policy of a point and the deadlines of a point and a job,
and the seed cases' data."""
