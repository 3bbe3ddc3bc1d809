"""Config validation: every bad input gets one clear error naming its key path."""

import copy

import pytest

from crossover_study.core.paths import REPO_ROOT
from crossover_study.study import job_limits
from crossover_study.study import points as study_points
from crossover_study.study.config import load_config, validate_config
from crossover_study.study.points import (
    batches,
    case_sizes,
    groups,
    measure_jobs,
    points,
    split_batches,
)
from crossover_study.study.spec import config_hash
from crossover_study.study.study_file import ConfigError

GOOD = {
    "study": "t",
    "sweep": {"frameworks": ["torch"], "devices": ["cpu", "cuda"], "variants": ["eager"]},
    "cases": {"s001-mlp": {"axes": {"hidden": [128, 512]}}},
}


def bad(path, value):
    """GOOD with the value at ``path`` (a tuple of keys) replaced or added."""
    config = copy.deepcopy(GOOD)
    node = config
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return config


def test_skip_variants_drops_a_case_s_rows_only():
    config = validate_config(
        {
            **GOOD,
            "sweep": {**GOOD["sweep"], "variants": ["eager", "compile"]},
            "cases": {
                "s001-mlp": {"axes": {"hidden": [128, 512]}, "skip_variants": ["compile"]},
                "s000-hjb": {},
            },
        }
    )
    variants = {
        case: {p.variant for p in points(config, case, "torch", "cpu")}
        for case in ("s001-mlp", "s000-hjb")
    }
    assert variants == {"s001-mlp": {"eager"}, "s000-hjb": {"eager", "compile"}}


def test_defaults_are_filled():
    config = validate_config(GOOD)
    assert config["missing_device"] == "skip"
    assert config["timing"]["blocks"] == 5
    assert config["devices"]["cpu"]["threads"] == 2
    assert GOOD.get("timing") is None  # the input is not modified


@pytest.mark.parametrize(
    "path, value, expected",
    [
        (("cases", "s003-cnn"), {}, r"at cases.s003-cnn: 's003-cnn' is not a seed case"),
        (("sweep", "frameworks"), ["torch", "jax"], r"sweep.frameworks\[1\]: 'jax' is not one of"),
        (("sweep", "devices"), ["cpu", "gpu"], r"sweep.devices\[1\]: 'gpu' is not one of"),
        (("sweep", "variants"), ["eager", "fast"], r"sweep.variants\[1\]: 'fast' is not one of"),
        (("cases", "s001-mlp", "axes", "hidden"), [128, 0], r"axes.hidden\[1\]: 0 is less than"),
        (("cases", "s001-mlp", "axes", "hidden"), [128, -4], r"axes.hidden\[1\]: -4 is less than"),
        (
            ("cases", "s001-mlp", "axes", "hidden"),
            [128, 512, 128],
            r"axes.hidden: duplicate value\(s\) 128",
        ),
        (
            ("cases", "s001-mlp", "axes", "hidden"),
            [128, 1.5],
            r"axes.hidden\[1\]: 1.5 is not of type 'integer'",
        ),
        (("cases", "s001-mlp", "axes", "width"), [8], r"axes: unknown key\(s\) 'width'"),
        (
            ("cases", "s001-mlp", "grid"),
            ["hidden", "units"],
            r"grid\[1\]: 'units' is not an axis of s001-mlp",
        ),
        (
            ("cases", "s001-mlp", "skip_variants"),
            ["compile"],
            r"cases.s001-mlp.skip_variants\[0\]: cannot skip 'compile': it is not in sweep",
        ),
        (
            ("cases", "s001-mlp", "skip_variants"),
            ["eager"],
            r"skip_variants\[0\]: cannot skip 'eager': eager is the baseline",
        ),
        (("timing", "blocks"), 2, r"timing.blocks: 2 is less than the minimum of 3"),
        (("timing", "min_blocks_s"), 0.1, r"at timing: unknown key\(s\) 'min_blocks_s'"),
        (("colour",), "blue", r"at <top level>: unknown key\(s\) 'colour'"),
        (("missing_device",), "ignore", r"missing_device: 'ignore' is not one of"),
        (("study",), "../x", r"at study: '../x' does not match"),
    ],
)
def test_bad_input_names_the_key_path(path, value, expected):
    with pytest.raises(ConfigError, match=expected):
        validate_config(bad(path, value))


CUDA = ("devices", "cuda")


@pytest.mark.parametrize(
    "path, value, expected",
    [
        ((*CUDA, "gpu"), 0, r"devices.cuda.gpu: 0 is less than the minimum of 1"),
        ((*CUDA, "gpu"), -2, r"devices.cuda.gpu: -2 is less than the minimum of 1"),
        ((*CUDA, "gpu"), 1.5, r"devices.cuda.gpu: 1.5 is not of type 'integer'"),
        ((*CUDA, "gpu"), "2", r"devices.cuda.gpu: '2' is not of type 'integer'"),
        ((*CUDA, "gpu"), True, r"devices.cuda.gpu: True is not of type 'integer'"),
        ((*CUDA, "slurm_partition"), "gpu,cpu", r"slurm_partition: 'gpu,cpu' is not one name"),
        ((*CUDA, "slurm_partition"), "gpu cpu", r"slurm_partition: 'gpu cpu' is not one name"),
        ((*CUDA, "slurm_partition"), "gpu\t", r"slurm_partition: 'gpu\\t' is not one name"),
        ((*CUDA, "slurm_partition"), "", r"slurm_partition: '' is not one name"),
        ((*CUDA, "slurm_account"), "a, b", r"devices.cuda.slurm_account: 'a, b' is not one name"),
        ((*CUDA, "gres"), "gpu 1", r"devices.cuda.gres: 'gpu 1' does not match"),
        ((*CUDA, "cpus_per_task"), 0, r"devices.cuda.cpus_per_task: 0 is less than the minimum"),
        ((*CUDA, "mem_mb"), 0, r"devices.cuda.mem_mb: 0 is less than the minimum of 1"),
        ((*CUDA, "runtime"), "1h", r"devices.cuda.runtime: '1h' is not of type 'integer'"),
        # Accelerators are asked for with gpu or gres, never through slurm_extra (P7).
        ((*CUDA, "slurm_extra"), "--gres=gpu:1", r"devices.cuda: unknown key\(s\) 'slurm_extra'"),
        (("devices", "gpu"), {}, r"at devices: unknown key\(s\) 'gpu'"),
        (("max_points_per_job",), 0, r"max_points_per_job: 0 is less than the minimum of 1"),
    ],
)
def test_bad_device_resources_name_the_key_path(path, value, expected):
    config = bad(path, value)
    config.setdefault("devices", {"cuda": {}}).setdefault("cpu", {})
    with pytest.raises(ConfigError, match=expected):
        validate_config(config)


def test_gpu_and_gres_together_and_gpu_model_alone_are_errors():
    both = bad(CUDA, {"gpu": 1, "gres": "gpu:1"})
    both["devices"]["cpu"] = {}
    with pytest.raises(ConfigError, match=r"at devices.cuda: give gpu .* or gres, not both"):
        validate_config(both)
    model = bad(CUDA, {"gpu_model": "a100"})
    model["devices"]["cpu"] = {}
    with pytest.raises(ConfigError, match=r"at devices.cuda: 'gpu' is a dependency of 'gpu_model'"):
        validate_config(model)


def test_threads_follow_cpus_per_task_and_must_not_differ():
    config = bad(("devices",), {"cpu": {"cpus_per_task": 4}, "cuda": {"threads": 3}})
    devices = validate_config(config)["devices"]
    assert devices["cpu"]["threads"] == devices["cpu"]["cpus_per_task"] == 4
    assert devices["cuda"]["threads"] == 3 and "cpus_per_task" not in devices["cuda"]
    same = bad(("devices",), {"cpu": {"threads": 2, "cpus_per_task": 2}, "cuda": {}})
    assert validate_config(same)["devices"]["cpu"]["threads"] == 2
    differ = bad(("devices",), {"cpu": {"threads": 2, "cpus_per_task": 8}, "cuda": {}})
    with pytest.raises(ConfigError, match=r"devices.cpu: threads \(2\) and cpus_per_task \(8\)"):
        validate_config(differ)


def test_slurm_resources_of_a_good_device_table_are_kept():
    table = {
        "cpu": {"slurm_partition": "cpu", "constraint": "icelake", "slurm_account": "proj1"},
        "cuda": {"slurm_partition": "gpu", "gpu": 1, "gpu_model": "h200", "mem_mb": 16000},
        "cuda_multi": {"slurm_partition": "gpu", "gres": "gpu:h200:4", "runtime": 120},
        "tpu": {"slurm_partition": "tpu-v5e"},
    }
    config = bad(("devices",), table)
    config["sweep"]["devices"] = ["cpu", "cuda", "cuda_multi", "tpu"]
    config["cases"] = {"s001-mlp": {"axes": {"hidden": [128, 512]}}}
    config["replication"] = {"cases": ["s001-mlp"], "devices": ["cuda_multi"], "variants": ["ddp"]}
    devices = validate_config(config)["devices"]
    for name, spec in table.items():
        assert devices[name].items() >= spec.items()
    assert devices["tpu"]["mem_mb"] == 4000 and devices["tpu"]["runtime"] == 60  # defaults


def test_swept_device_must_be_defined():
    config = bad(("devices",), {"cpu": {}})
    with pytest.raises(ConfigError, match=r"sweep.devices\[1\]: device 'cuda' is not defined"):
        validate_config(config)


@pytest.mark.parametrize("device", ["tpu", "cuda_multi"])
def test_swept_accelerator_class_must_be_defined(device):
    config = bad(("sweep", "devices"), ["cpu", device])
    with pytest.raises(ConfigError, match=rf"sweep.devices\[1\]: device '{device}' is not defined"):
        validate_config(config)


def test_no_cases_is_an_error():
    with pytest.raises(ConfigError, match="at cases"):
        validate_config(bad(("cases",), {}))


def test_unreadable_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("study: [unclosed\n")
    with pytest.raises(ConfigError, match=r"c\.yaml:2:1: YAML error: expected ','"):
        load_config(path)
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")


def test_seed_size_is_always_measured_and_grid_expands():
    sizes = case_sizes("s001-mlp", {"axes": {"hidden": [512]}})
    assert {"batch": 64, "d_in": 1024, "hidden": 128} in sizes
    assert {"batch": 64, "d_in": 1024, "hidden": 512} in sizes
    assert len(sizes) == 2
    grid = case_sizes(
        "s000-hjb", {"axes": {"batch": [10, 1000], "width": [32]}, "grid": ["batch", "width"]}
    )
    assert len(grid) == 3 * 2  # batch {10, 100, 1000} x width {8, 32}


def test_single_points_are_measured_beside_the_sweep(tmp_path):
    sizes = case_sizes(
        "s001-mlp", {"axes": {"hidden": [512]}, "points": [{"d_in": 5000, "hidden": 5000}]}
    )
    assert {"batch": 64, "d_in": 5000, "hidden": 5000} in sizes and len(sizes) == 3
    path = tmp_path / "c.yaml"
    path.write_text(
        "study: p\ncases:\n  s001-mlp:\n    axes: {hidden: [128]}\n"
        "    points: [{d_in: 5000, width: 3}]\n"
    )
    with pytest.raises(ConfigError, match=r"cases\.s001-mlp\.points\[0\]\.width: 'width' is not"):
        load_config(path)


def test_shipped_studies_are_valid_and_cover_every_case():
    default = load_config(REPO_ROOT / "config" / "config.yaml")
    full = load_config(REPO_ROOT / "config" / "studies" / "full.yaml")
    for study in (default, full):
        assert set(study["cases"]) == {"s000-hjb", "s001-mlp", "s002-iris", "s004-lstm"}
        assert study["sweep"]["frameworks"] == ["torch", "tensorflow"]
        assert study["sweep"]["devices"] == ["cpu", "cuda"]
        for case, case_config in study["cases"].items():
            for axis, values in case_config["axes"].items():
                if (case, axis) == ("s001-mlp", "batch"):
                    continue  # the seed's N = 64 is held; D_in and H are the swept axes
                # the default's LSTM axes: the seed and one size four times off it
                fewest = 2 if (study, case) == (default, "s004-lstm") else 3
                assert fewest <= len(set(values)) <= 5, (case, axis, values)
    assert default["sweep"] == full["sweep"] and default["replication"] == full["replication"]
    # The full study: every case with two axes has a grid for its speedup heat map, and
    # every variant is measured; the default sweeps one axis at a time and leaves the
    # LSTM's compiled CPU step (tens of times slower than eager) to the full study.
    for case, case_config in full["cases"].items():
        assert not case_config["skip_variants"], case
        if len(case_config["axes"]) == 2:
            assert case_config.get("grid"), case
    assert not any(c.get("grid") for c in default["cases"].values())
    skipped = {c: s["skip_variants"] for c, s in default["cases"].items() if s["skip_variants"]}
    assert skipped == {
        "s004-lstm": [
            "compile",
            "xla",
            "steps_per_execution",
            "train_on_batch",
            "custom_step",
            "tf_data_repeat",
            "read_loss_every_step",
            "read_loss_every_1000",
            "copy_data_each_step",
            "mirrored_fit",
            "strategy_step",
        ]
    }
    # a skipped replica variant has no replicated points either; the others keep theirs
    replicated = {p.variant for p in points(default, "s004-lstm", "tensorflow", "cpu")}
    assert "mirrored_fit" not in replicated and {"mirrored", "ddp"} <= replicated
    smoke = load_config(REPO_ROOT / "config" / "studies" / "smoke.yaml")
    assert len(smoke["cases"]) == 2 and smoke["sweep"]["devices"] == ["cpu"]
    # two sizes of eager, plus copy_data_each_step and the unsynced eager at the seed size
    data_parallel = ("ddp", "mirrored")
    ordinary = {
        g: [p for p in points(smoke, *g) if p.variant not in data_parallel] for g in groups(smoke)
    }
    assert {len(pts) for pts in ordinary.values()} == {4}
    # s001-mlp also has ddp and mirrored on one replica (the scaling baseline) and x
    # strong and weak at 2 replicas (own job).
    replicated = {g: len(points(smoke, *g)) - len(ordinary[g]) for g in groups(smoke)}
    assert replicated == {g: 6 if g[0] == "s001-mlp" else 0 for g in groups(smoke)}


def test_variants_and_unsynced_timing_at_the_seed_size_by_default():
    config = validate_config(
        bad(
            ("sweep",),
            {
                "frameworks": ["torch"],
                "devices": ["cpu"],
                "variants": ["eager", "copy_data_each_step"],
                "timing": ["synced", "unsynced"],
            },
        )
    )
    pts = points(config, "s001-mlp", "torch", "cpu")
    eager = [p for p in pts if p.variant == "eager" and p.timing == "synced"]
    assert len(eager) == 2  # hidden 128 (seed) and 512
    extras = [p for p in pts if p not in eager]
    assert {(p.variant, p.timing) for p in extras} == {
        ("copy_data_each_step", "synced"),
        ("eager", "unsynced"),
    }
    assert all(p.is_seed_size() for p in extras)
    assert len({p.key() for p in pts}) == len(pts)  # unsynced points have their own key
    config["sweep"]["extras_at"] = "all"
    assert len(points(config, "s001-mlp", "torch", "cpu")) == 2 * 3


def test_unknown_timing_is_rejected():
    with pytest.raises(ConfigError, match=r"sweep.timing\[0\]: 'async' is not one of"):
        validate_config(bad(("sweep", "timing"), ["async"]))


@pytest.mark.parametrize("n, size", [(0, 3), (1, 1), (7, 3), (9, 3), (10, 3), (250, 100)])
def test_split_batches_covers_every_item_once_in_nearly_equal_batches(n, size):
    items = list(range(n))
    parts = split_batches(items, size)
    assert len(parts) == -(-n // size)
    assert sorted(x for part in parts for x in part) == items
    assert all(len(part) <= size for part in parts)
    if parts:
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert split_batches(items, size) == parts  # deterministic: a rerun finds its journal
    with pytest.raises(ValueError):
        split_batches(items, 0)


def test_small_groups_stay_one_job_and_large_ones_are_batched():
    default = load_config(REPO_ROOT / "config" / "config.yaml")
    jobs = measure_jobs(default)
    assert [j for j in jobs if j[3] == 0] == [(*g, 0) for g in groups(default)]
    # The replicated points of each replicated case x framework: one more job (2 replicas).
    replicated = {(c, f, "cpu") for c in ("s004-lstm", "s001-mlp") for f in ("torch", "tensorflow")}
    assert {j[:3] for j in jobs if j[3] == 1} == replicated and max(j[3] for j in jobs) == 1
    config = validate_config({**GOOD, "max_points_per_job": 1})
    jobs = measure_jobs(config)
    assert [j[3] for j in jobs] == [0, 1, 0, 1]  # two points per group, one per job
    keys = [p.key() for b in batches(config, "s001-mlp", "torch", "cpu") for p in b]
    assert keys == [p.key() for p in points(config, "s001-mlp", "torch", "cpu")]


def test_the_deadline_defaults_to_600_s_without_changing_any_studys_hash_or_params():
    base = {"study": "x", "cases": {"s001-mlp": {}}}
    default = validate_config(base)
    assert "point_deadline_s" not in default["timing"]  # not filled in
    assert job_limits.point_deadline_s(default) == 600
    off = validate_config({**base, "timing": {"point_deadline_s": None}})
    assert job_limits.point_deadline_s(off) is None
    short = validate_config({**base, "timing": {"point_deadline_s": 30}})
    assert job_limits.point_deadline_s(short) == 30
    # It changes no measurement: neither the config hash nor the measure rule's params.
    hashes = {study_points.measurement_hash(c) for c in (default, off, short)}
    assert len(hashes) == 1
    # ... and a study without it hashes as before the key existed (every config key but
    # NOT_MEASUREMENT_KEYS), so its journals, rows and manifests stay "this config".
    old = {k: v for k, v in default.items() if k not in study_points.NOT_MEASUREMENT_KEYS}
    assert hashes == {config_hash(old)}
    assert study_points.measurement_timing(short) == study_points.measurement_timing(default)
    assert list(study_points.measurement_timing(default)) == sorted(default["timing"])
    with pytest.raises(ConfigError, match=r"timing.point_deadline_s: 0 is less than or equal"):
        validate_config({**base, "timing": {"point_deadline_s": 0}})
