"""A validated study config expanded into what the workflow runs: the sizes and points
of every case x framework x device group, the measuring jobs (batches of points, repeat
runs, their GPUs, CPUs and conda env) and the measurement settings and hash.

:class:`TimingPolicy` is the spec of one point's timing (what the harness is asked to
do), read from the config's ``timing`` (:func:`timing_policy`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import pickle
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from crossover_study.study import cases as case_registry
from crossover_study.study.spec import (
    DEFAULT_TPU_CORES,
    REPLICA_VARIANTS,
    PointSpec,
    config_hash,
    seed_sizes,
)

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class TimingPolicy:
    """How long and how carefully to time one point.

    min_block_s: a timed block lasts at least this many seconds (block length doubles
        until it does), and at least ``100 x`` the measured timer+sync overhead, so that
        the overhead stays below 1% of a block (as ``blocked_autorange`` does).
    n_blocks: timed blocks per point (at least 3).
    max_warmup_s: warm-up stops after this many seconds even if not yet stable.
    stable_rel: warm-up is over when two consecutive blocks differ by less than this
        relative amount in seconds per step.
    noise_threshold: IQR/median above it flags the point as noisy (STUDY.md: 0.1).
    max_point_s: soft budget per point; fewer blocks (never under 3) when exceeded.
    sync_check_s: time budget of the block-length check's long blocks; they run
        ``sync_check_factor`` blocks' worth of steps, fewer (never under 2) when one
        block already lasts longer than this budget allows; split in two halves, one
        just before and one just after the timed blocks, when each half can hold at
        least 2 blocks' worth.
    synced: False times the anti-pattern on purpose (clock read without a device
        sync); never the default.
    fresh_stack: every block (first step, warm-up, timed, partner and check blocks) runs
        in a new thread, whose Python stack is as shallow as a user's loop's
        (:mod:`crossover_study.core.step_thread`); set per point for the frameworks
        whose ops capture the caller's stack (TensorFlow), never from the config.
    disable_gc: Python's garbage collector is switched off during warm-up and timed
        blocks, as ``timeit`` (and so ``torch.utils.benchmark``) does, without a full
        collection first (neither does ``timeit``: with a framework loaded it pauses the
        steps for about half a second, and the steps after a pause run slower); autograd's
        many small objects otherwise trigger collections inside blocks.
    """

    min_block_s: float = 0.05
    n_blocks: int = 7
    max_warmup_s: float = 1.0
    stable_rel: float = 0.1
    noise_threshold: float = 0.1
    max_point_s: float = 10.0
    sync_check_s: float = 1.0
    sync_check_factor: int = 10
    synced: bool = True
    disable_gc: bool = True
    fresh_stack: bool = False

    def __post_init__(self) -> None:
        if self.n_blocks < 3:
            raise ValueError(f"timing.blocks must be at least 3, got {self.n_blocks}")
        for name in ("min_block_s", "max_warmup_s", "noise_threshold", "max_point_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"timing.{name} must be positive, got {getattr(self, name)}")
        if self.sync_check_s < 0:
            raise ValueError(f"timing.sync_check_s must be >= 0, got {self.sync_check_s}")
        if self.sync_check_factor < 2:
            raise ValueError(
                f"timing.sync_check_factor must be at least 2, got {self.sync_check_factor}"
            )


def case_sizes(case: str, case_config: Mapping[str, Any]) -> list[dict[str, int]]:
    """Size points of ``case``: each axis swept with the others at the seed's size,
    plus the full grid over ``grid`` axes if given and each of ``points`` (single sizes,
    the axes they leave out at the seed's); the seed size always included.

    Returns a sorted list of dicts mapping every axis of the case to a positive int.
    """
    seed = seed_sizes(case)
    axes = {a: sorted(set(case_config.get("axes", {}).get(a, [])) | {v}) for a, v in seed.items()}
    points = {tuple(sorted(seed.items()))}
    for axis, values in axes.items():
        for value in values:
            points.add(tuple(sorted({**seed, axis: value}.items())))
    grid = case_config.get("grid")
    if grid:
        for combo in itertools.product(*(axes[a] for a in grid)):
            points.add(tuple(sorted({**seed, **dict(zip(grid, combo, strict=True))}.items())))
    for extra in case_config.get("points", ()):
        points.add(tuple(sorted({**seed, **extra}.items())))
    return [dict(p) for p in sorted(points)]


def points(config: Mapping[str, Any], case: str, framework: str, device: str) -> list[PointSpec]:
    """The points one measuring job (case × framework × device) measures: the eager
    program over every size; the other variants and the unsynced timing over
    ``sweep.extras_at`` (the seed's size only, or every size), less the case's
    ``skip_variants``. ``strategy_step`` points
    carry the config's ``tpu_cores`` (their global batch divides over them)."""
    sizes = case_sizes(case, config["cases"][case])
    sweep = config["sweep"]
    seed = seed_sizes(case)
    extra_sizes = sizes if sweep.get("extras_at", "seed") == "all" else [seed]
    # strategy_step runs the TPU's batch on every device (spec.tpu_global_batch).
    cores = config.get("tpu_cores", DEFAULT_TPU_CORES)
    pts = [
        PointSpec(
            case,
            framework,
            device,
            v,
            s,
            tpu_cores=cores if v == "strategy_step" else None,
        )
        for v in sweep["variants"]
        if v not in config["cases"][case].get("skip_variants", ())
        for s in (sizes if v == "eager" else extra_sizes)
    ]
    # The unsynchronised anti-pattern is shown beside the naive program only.
    if "unsynced" in sweep.get("timing", ["synced"]):
        pts += [PointSpec(case, framework, device, "eager", s, "unsynced") for s in extra_sizes]
    return pts + replicated_points(config, case, framework, device)


def replicated_points(
    config: Mapping[str, Any], case: str, framework: str, device: str
) -> list[PointSpec]:
    """The ``replication`` section's points of one group: at the seed's size, per
    variant one replica (the scaling baseline: the same data-parallel program on one
    device, so that efficiency compares like with like) and every replica count x
    scaling of the section (empty when the section is absent, the case or device is not
    listed), less the case's ``skip_variants``. A variant of the other framework is kept:
    it gives a ``not_applicable`` row with the reason, as the sweep's variants do."""
    rep = config.get("replication")
    if not rep or case not in rep["cases"] or device not in rep["devices"]:
        return []
    seed = seed_sizes(case)
    skipped = config["cases"][case].get("skip_variants", ())
    return [
        point
        for v in rep["variants"]
        if v not in skipped
        for point in (
            PointSpec(case, framework, device, v, seed, replicas=1),
            *(
                PointSpec(case, framework, device, v, seed, replicas=r, scaling=s)
                for r in sorted(rep["replicas"])
                for s in rep["scaling"]
            ),
        )
    ]


def groups(config: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Every (case, framework, device) group of the study (one or more measuring jobs):
    a seed in every swept framework, a case of the user's own in its framework only."""
    sweep = config["sweep"]
    return [
        (c, f, d)
        for c in config["cases"]
        for f in sweep["frameworks"]
        if f in case_registry.get(c).frameworks
        for d in sweep["devices"]
    ]


def split_batches(items: Sequence[T], max_items: int) -> list[tuple[T, ...]]:
    """Split ``items`` into ``ceil(len / max_items)`` batches of nearly equal size, dealt
    round-robin (batch ``i`` holds items ``i, i + n, i + 2n, ...``), so that every batch
    spans the range of a sorted list. Deterministic; ``[]`` for no items.

    Raises ValueError when ``max_items`` is below 1.
    """
    if max_items < 1:
        raise ValueError(f"max_items must be at least 1, got {max_items}")
    n = math.ceil(len(items) / max_items)
    return [tuple(items[i::n]) for i in range(n)]


def batches(
    config: Mapping[str, Any], case: str, framework: str, device: str
) -> list[tuple[PointSpec, ...]]:
    """The points of one group split into measuring jobs of at most
    ``config['max_points_per_job']`` points each (see :func:`split_batches`): a new
    list of batches (tuples of points) per call.

    Computed once per config and group (:func:`_plan`; the rule files ask for one job's
    batch in several input functions of every job) and kept while the config is
    unchanged: the points are shared between calls and must not be changed. Raises
    KeyError for a case the config does not have.

    Points of one replica come first (the ordinary points, batched as before replicas
    existed, so their tables and journals still match, and the one-replica baselines of
    the replica variants, which need no process or device of their own); then the
    replicated points, one or more jobs per replica count: a job's replicas decide its
    processes, its logical CPU devices and, on cuda_multi, the GPUs it asks Slurm for
    (one for a job whose only runnable points are the baselines).
    """
    return list(_plan_of(config).batches(case, framework, device))


def _batches(
    config: Mapping[str, Any], case: str, framework: str, device: str
) -> list[tuple[PointSpec, ...]]:
    """:func:`batches` computed from ``config`` (uncached)."""
    every = points(config, case, framework, device)
    limit = config["max_points_per_job"]
    out = split_batches([p for p in every if p.replicas == 1], limit)
    for r in sorted({p.replicas for p in every if p.replicas > 1}):
        out += split_batches([p for p in every if p.replicas == r], limit)
    # timing.repeats: run r of every batch is a job of its own after the batches of run
    # r - 1 (batch index = r x len(out) + i), so run 0 keeps the jobs of a study without it.
    return out + [
        tuple(dataclasses.replace(p, repeat=r) for p in batch)
        for r in range(1, repeats(config))
        for batch in out
    ]


def repeats(config: Mapping[str, Any]) -> int:
    """Separate runs per point (``timing.repeats``; 1 when left out, see the schema)."""
    return int(config["timing"].get("repeats", 1))


def batch_repeat(
    config: Mapping[str, Any], case: str, framework: str, device: str, batch: int
) -> int:
    """The run (0-based, ``timing.repeats``) that measuring job ``batch`` of a group
    measures. Raises IndexError for a batch the group does not have."""
    return batches(config, case, framework, device)[batch][0].repeat


def previous_round_jobs(
    config: Mapping[str, Any], case: str, framework: str, device: str, batch: int
) -> list[tuple[str, str, str, int]]:
    """Measuring jobs that job ``batch`` of a group waits for: for run ``r > 0`` every
    job of run ``r - 1`` of the same case and framework on every device (rounds: each
    device's runs alternate with the other devices', so a drift of the machine over the
    study hits the CPU and the accelerator alike); none for run 0. Items are (case,
    framework, device, batch index) as in :func:`measure_jobs`."""
    r = batch_repeat(config, case, framework, device, batch)
    if r == 0:
        return []
    return list(_plan_of(config).rounds().get((case, framework, r - 1), ()))


def job_replicas(batch: Sequence[PointSpec]) -> int:
    """Replicas of a measuring job: the most of its points (1 for ordinary jobs)."""
    return max((p.replicas for p in batch), default=1)


def job_gpu_resources(
    config: Mapping[str, Any], case: str, framework: str, device: str, batch: int
) -> dict[str, Any]:
    """Slurm GPU resources of one measuring job: ``{"gpu", "gpu_model", "gres"}``.

    The device class's own ``gpu``/``gpu_model``/``gres``, except for a ``cuda_multi``
    job of replicated points, which asks for exactly as many GPUs as its points have
    replicas: ``gpu`` becomes the replica count (``gpu_model`` kept), or the count of a
    ``gres`` such as ``gpu:h200:4`` is replaced (``gpu:h200:<replicas>``); a class
    with neither gets ``gpu = replicas``. Raises IndexError for a batch the group does
    not have.
    """
    spec = config["devices"][device]
    res = {k: spec.get(k) for k in ("gpu", "gpu_model", "gres")}
    points_of_job = batches(config, case, framework, device)[batch]
    replicas = job_replicas(points_of_job)
    if device != "cuda_multi" or not any(p.variant in REPLICA_VARIANTS for p in points_of_job):
        return res
    if res["gres"] is not None:
        parts = res["gres"].split(":")
        if len(parts) > 1 and parts[-1].rstrip("TGM").isdigit():
            parts = parts[:-1]
        res["gres"] = ":".join([*parts, str(replicas)])
    else:
        res["gpu"] = replicas
    return res


def logical_cpus(group_points: Sequence[PointSpec], device: str) -> int:
    """Logical CPU devices TensorFlow must be given before it initialises: the most
    replicas of a TensorFlow replica point (``mirrored``, ``mirrored_fit``) on ``cpu``
    (1: none to configure)."""
    if device != "cpu":
        return 1
    tf_points = [p for p in group_points if REPLICA_VARIANTS.get(p.variant) == "tensorflow"]
    return max((p.replicas for p in tf_points), default=1)


def measure_jobs(config: Mapping[str, Any]) -> list[tuple[str, str, str, int]]:
    """Every measuring job of the study as (case, framework, device, batch index), in
    the order of :func:`groups` (a new list per call, computed once per config)."""
    return list(_plan_of(config).jobs())


class _Plan:
    """What :func:`batches`, :func:`measure_jobs` and :func:`previous_round_jobs`
    compute from one config, each part computed on first use and then kept. A cached
    plan holds its own copy of the config (unpickled from its cache key), so a caller
    that changes its config afterwards changes neither the plan nor what it computes
    later; an uncached one (a config that does not pickle) serves one call."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config
        self._batches: dict[tuple[str, str, str], tuple[tuple[PointSpec, ...], ...]] = {}
        self._jobs: tuple[tuple[str, str, str, int], ...] | None = None
        self._rounds: dict[tuple[str, str, int], tuple[tuple[str, str, str, int], ...]] = {}

    def batches(self, case: str, framework: str, device: str) -> tuple:
        """The group's batches (:func:`_batches`), computed on first use."""
        group = (case, framework, device)
        if group not in self._batches:
            self._batches[group] = tuple(_batches(self.config, case, framework, device))
        return self._batches[group]

    def jobs(self) -> tuple[tuple[str, str, str, int], ...]:
        """Every measuring job, group by group (:func:`groups`), computed on first use."""
        if self._jobs is None:
            self._jobs = tuple(
                (c, f, d, i)
                for c, f, d in groups(self.config)
                for i in range(len(self.batches(c, f, d)))
            )
        return self._jobs

    def rounds(self) -> dict[tuple[str, str, int], tuple[tuple[str, str, str, int], ...]]:
        """Jobs per (case, framework, run), in :meth:`jobs` order."""
        if not self._rounds and self.jobs():
            rounds: dict[tuple[str, str, int], list] = {}
            for c, f, d, i in self.jobs():
                rounds.setdefault((c, f, self.batches(c, f, d)[i][0].repeat), []).append(
                    (c, f, d, i)
                )
            self._rounds = {k: tuple(v) for k, v in rounds.items()}
        return self._rounds


def _plan_of(config: Mapping[str, Any]) -> _Plan:
    """The :class:`_Plan` of ``config`` as it is now: the cached one, or a fresh plan of
    this call only when ``config`` cannot be a cache key (it does not pickle).

    The key is the config's pickle (every value with its type and every mapping in
    its order, so two configs share a plan only when nothing the functions read
    differs; ``json.dumps`` would merge ``1`` and ``"1"`` keys) and the active case
    registry's seed sizes and frameworks of the config's cases (a plug-in case is
    registered from the config last validated, :func:`crossover_study.study.cases.use`).
    Pickling a study's config takes microseconds; the batches of a 25 000-point group
    take a second, and the rule files ask for them in several functions of every job.
    """
    try:
        key = (
            pickle.dumps(config, protocol=pickle.HIGHEST_PROTOCOL),
            tuple(_registry_view(name) for name in config["cases"]),
        )
        hash(key)
    except Exception:  # noqa: BLE001 - any config that is no key is computed uncached
        return _Plan(config)
    return _plan(key)


def _registry_view(name: str) -> tuple | None:
    """What the study-points functions read of case ``name`` in the active registry
    (None for a case it does not know: computing with it raises, uncached)."""
    try:
        case = case_registry.get(name)
    except KeyError:
        return None
    return (tuple(case.seed.items()), case.frameworks)


@functools.lru_cache(maxsize=8)
def _plan(key: tuple[bytes, tuple]) -> _Plan:
    """The plan of the config pickled in ``key[0]`` (the last few configs kept)."""
    return _Plan(pickle.loads(key[0]))


#: Conda env (``envs/<name>.yaml``) of a measuring job per framework and device class.
#: torch has no TPU backend here, so torch's tpu jobs (which only record unavailable rows)
#: use the small CPU build.
MEASURE_ENVS: dict[tuple[str, str], str] = {
    ("torch", "cpu"): "torch-cpu",
    ("torch", "cuda"): "torch-cuda",
    ("torch", "cuda_multi"): "torch-cuda",
    ("torch", "tpu"): "torch-cpu",
    ("tensorflow", "cpu"): "tensorflow-cpu",
    ("tensorflow", "cuda"): "tensorflow-cuda",
    ("tensorflow", "cuda_multi"): "tensorflow-cuda",
    ("tensorflow", "tpu"): "tensorflow-tpu",
}


def measure_env(framework: str, device: str) -> str:
    """Path of the conda env file of a measuring job, relative to the repository root
    (e.g. ``envs/torch-cuda.yaml``). Raises KeyError for an unknown pair."""
    return f"envs/{MEASURE_ENVS[(framework, device)]}.yaml"


def timing_policy(config: Mapping[str, Any]) -> TimingPolicy:
    """The harness policy from ``config['timing']``."""
    t = config["timing"]
    return TimingPolicy(
        min_block_s=t["min_block_s"],
        n_blocks=t["blocks"],
        max_warmup_s=t["max_warmup_s"],
        noise_threshold=t["noise_threshold"],
        max_point_s=t["max_point_s"],
        sync_check_s=t["sync_check_s"],
    )


#: Keys that do not change what is measured: the study's name, whether curves may
#: merge environments (a collect-time policy that can be changed after measuring), the
#: device cards priced and the report's figure formats.
NOT_MEASUREMENT_KEYS: tuple[str, ...] = ("study", "merge_environments", "predict", "figure_formats")
#: Keys under ``timing`` that do not change what is measured: the point deadline decides
#: only when a stuck point is given up (its error row names the deadline), never how a
#: point that finishes is timed.
#: The job deadline likewise decides only when a job is given up.
#: ``repeats`` does not change how one run is measured: runs after the first have point
#: keys and journals of their own, so raising it keeps the runs already measured.
#: The contention settings decide whether a point is measured once more and flagged,
#: never how a point is timed (:class:`crossover_study.study.job_limits.ContentionPolicy`).
NOT_MEASUREMENT_TIMING_KEYS: tuple[str, ...] = (
    "point_deadline_s",
    "job_deadline_s",
    "repeats",
    "contention_share",
    "contention_wait_s",
)


def measurement_timing(config: Mapping[str, Any]) -> dict:
    """``config['timing']`` without :data:`NOT_MEASUREMENT_TIMING_KEYS`, sorted by key
    (the measure rule's ``timing`` param: a change reruns the measuring jobs)."""
    return dict(
        sorted((k, v) for k, v in config["timing"].items() if k not in NOT_MEASUREMENT_TIMING_KEYS)
    )


def measurement_hash(config: Mapping[str, Any], case: str | None = None) -> str:
    """Hash (:func:`spec.config_hash`) of what determines a measurement: everything but
    :data:`NOT_MEASUREMENT_KEYS` and, under ``timing``,
    :data:`NOT_MEASUREMENT_TIMING_KEYS`. With ``case``, of what determines that case's
    measurements: the other cases left out (``cases`` holds only ``case``, and
    ``replication.cases`` only ``case`` where it lists it), so that adding or editing a
    case does not change the hash of the rows of the others, which are not measured
    again (the row column ``config_hash``; the manifest's ``config.case_hashes``)."""
    kept = {k: v for k, v in config.items() if k not in NOT_MEASUREMENT_KEYS}
    if isinstance(kept.get("timing"), Mapping):
        kept["timing"] = measurement_timing(kept)
    if case is not None:
        kept["cases"] = {case: config["cases"][case]}
        rep = kept.get("replication")
        if isinstance(rep, Mapping) and "cases" in rep:
            kept["replication"] = {**rep, "cases": [c for c in rep["cases"] if c == case]}
    return config_hash(kept)
