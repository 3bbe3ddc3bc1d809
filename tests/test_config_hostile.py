"""Hostile and odd study files (issue 36): names that are not what they look like, NaN
and infinities, keys YAML reads as other types, keys given twice, YAML syntax errors,
more threads than cores, reserved study names; and random study files, each accepted
and planned or refused with one line naming a key (hypothesis)."""

import copy
import math
import re
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossover_study import cli
from crossover_study.core.paths import REPO_ROOT
from crossover_study.study import points as study_points
from crossover_study.study.config import load_config, validate_config
from crossover_study.study.points import measure_jobs
from crossover_study.study.study_file import (
    ConfigError,
    check_config_files,
    check_threads,
    local_cores,
    read_yaml,
)

GOOD = {
    "study": "t",
    "sweep": {"frameworks": ["torch"], "devices": ["cpu", "cuda"], "variants": ["eager"]},
    "cases": {"s001-mlp": {"axes": {"hidden": [128, 512]}}},
}
PLUGIN = REPO_ROOT / "examples" / "digits_cnn.py"
PLUGIN_SEED = "{batch: 32, channels: 16}"


def with_value(path, value, config=GOOD):
    """``config`` with the value at ``path`` (a tuple of keys) replaced or added."""
    config = copy.deepcopy(config)
    node = config
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return config


def refused(config) -> str:
    """The one-line message validate_config refuses ``config`` with."""
    with pytest.raises(ConfigError) as error:
        validate_config(config)
    message = str(error.value)
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.parametrize(
    "path, value, where",
    [
        (("study",), "t\n", "study"),
        (("devices", "cpu", "slurm_partition"), "cpu\n", "devices.cpu.slurm_partition"),
        (("devices", "cpu", "slurm_account"), "lab\n", "devices.cpu.slurm_account"),
        (("devices", "cuda", "gres"), "gpu:1\n", "devices.cuda.gres"),
        (("devices", "cuda", "gpu"), 1, None),  # (with gpu_model below)
        (("cases", "s001-mlp\n"), {}, "cases"),
        (("cases", "s001-mlp", "axes", "hidden\n"), [128], "cases.s001-mlp.axes"),
    ],
)
def test_a_name_ending_in_a_newline_is_refused(path, value, where):
    if where is None:  # gpu_model needs gpu
        config = with_value(("devices", "cuda", "gpu_model"), "a100\n", with_value(path, value))
        where = "devices.cuda.gpu_model"
    else:
        config = with_value(path, value)
    message = refused(config)
    assert message.startswith(f"config error at {where}: ")
    assert r"\n'" in message  # the value shown with its newline


def test_a_plugin_name_ending_in_a_newline_is_refused():
    seed = {"batch": 32, "channels": 16}
    spec = {"workload": str(PLUGIN), "framework": "torch", "seed": seed, "axes": {}}
    config = with_value(("cases", "mine"), spec)
    assert validate_config(config)["cases"]["mine"]["seed"] == seed
    message = refused(with_value(("cases", "mine", "entry"), "build\n", config))
    assert message.startswith("config error at cases.mine.entry: 'build\\n' does not match")
    bad_seed = with_value(("cases", "mine", "seed"), {**seed, "batch\n": 8}, config)
    assert refused(bad_seed).startswith("config error at cases.mine.seed: key name 'batch\\n'")


def test_names_are_bounded():
    assert validate_config(with_value(("study",), "s" * 64))["study"] == "s" * 64
    message = refused(with_value(("study",), "s" * 300))
    assert (
        message.startswith("config error at study: ")
        and "300 characters long (at most 64)" in message
    )
    message = refused(with_value(("cases", "c" * 65), {}))
    assert message.startswith("config error at cases: key name ") and "at most 64" in message


@pytest.mark.parametrize(
    "key, shown", [("null", "null"), ("true", "true"), ("123", "123"), ("1.5", "1.5")]
)
def test_a_case_key_yaml_reads_as_another_type_is_named(tmp_path, key, shown):
    path = tmp_path / "study.yaml"
    path.write_text(
        "study: t\nsweep: {frameworks: [torch], devices: [cpu]}\ncases:\n"
        f"  s001-mlp: {{}}\n  {key}:\n    workload: {PLUGIN}\n    framework: torch\n"
        f"    seed: {PLUGIN_SEED}\n"
    )
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(error.value).startswith(f"config error at cases: key {shown} is read by YAML as ")
    # Quoted, the same name is a name.
    path.write_text(path.read_text().replace(f"  {key}:", f"  '{key.replace('.', '-')}':"))
    if key in ("123", "1.5"):
        assert set(load_config(path)["cases"]) == {"s001-mlp", key.replace(".", "-")}


@pytest.mark.parametrize(
    "key", ["min_block_s", "max_warmup_s", "max_point_s", "noise_threshold", "sync_check_s"]
)
@pytest.mark.parametrize(
    "value, shown", [(math.nan, ".nan"), (math.inf, ".inf"), (-math.inf, "-.inf")]
)
def test_nan_and_infinities_are_refused_naming_the_key(key, value, shown):
    message = refused(with_value(("timing", key), value))
    assert message == f"config error at timing.{key}: {shown} is not a finite number"


def test_an_infinite_point_deadline_is_refused_and_null_is_no_deadline(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(GOOD) + "timing: {point_deadline_s: .inf}\n")
    with pytest.raises(
        ConfigError, match=r"^config error at timing.point_deadline_s: \.inf is not"
    ):
        load_config(path)
    path.write_text(yaml.safe_dump(GOOD) + "timing: {point_deadline_s: null}\n")
    assert load_config(path)["timing"]["point_deadline_s"] is None
    message = refused(with_value(("cases", "s001-mlp", "axes", "hidden"), [128, math.nan]))
    assert message.startswith("config error at cases.s001-mlp.axes.hidden[1]: .nan is not")


@pytest.mark.parametrize("name", ["reference", "paper", "Reference"])
def test_the_committed_folders_are_not_study_names(name):
    message = refused(with_value(("study",), name))
    assert message.startswith(f"config error at study: {name!r} is the name of a committed folder")


DUPLICATE_CASE = """\
study: t
sweep: {frameworks: [torch], devices: [cpu]}
cases:
  s001-mlp:
    axes: {hidden: [128]}
  s001-mlp:
    axes: {hidden: [512]}
"""
DUPLICATE_AXIS = """\
study: t
sweep: {frameworks: [torch], devices: [cpu]}
cases:
  s001-mlp:
    axes:
      hidden: [128]
      batch: [8]
      hidden: [512]
"""


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            DUPLICATE_CASE,
            r":6:3: config error at cases: 's001-mlp' is given twice \(lines 4 and 6\)",
        ),
        (
            DUPLICATE_AXIS,
            r":8:7: config error at cases.s001-mlp.axes: 'hidden' is given twice \(lines 6 and 8\)",
        ),
    ],
)
def test_a_key_given_twice_is_named_with_both_lines(tmp_path, text, expected):
    path = tmp_path / "study.yaml"
    path.write_text(text)
    for check in (load_config, read_yaml, lambda p: check_config_files([p])):
        with pytest.raises(ConfigError, match=re.escape(str(path)) + expected):
            check(path)


def test_a_merge_key_may_be_overridden(tmp_path):
    # YAML's merge key: the mapping's own key wins over the merged one (not a duplicate).
    path = tmp_path / "study.yaml"
    path.write_text("a: &a {x: 1, y: 2}\nb:\n  <<: *a\n  x: 3\n")
    assert read_yaml(path) == {"a": {"x": 1, "y": 2}, "b": {"x": 3, "y": 2}}


@pytest.mark.parametrize(
    "text, where, problem",
    [
        # bad indentation
        (
            "study: t\ncases:\n  s001-mlp:\n    axes: {}\n   grid: [a, b]\n",
            ":5:4:",
            "expected <block end>",
        ),
        ("study: t\ncases: {s001-mlp: {axes: {hidden: [1, 2}}}\n", ":2:40:", "expected ',' or ']'"),
        ("study: t\ncases:\n\ts001-mlp: {}\n", ":3:1:", "found character '\\t'"),
        ('study: "t\ncases: {}\n', ":3:1:", "found unexpected end of stream"),
    ],
    ids=["bad-indent", "unclosed-bracket", "tab", "unclosed-quote"],
)
def test_a_yaml_syntax_error_names_file_line_and_column(tmp_path, text, where, problem):
    path = tmp_path / "study.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    assert message.startswith(f"{path}{where} YAML error: ") and problem in message, message
    assert "\n" not in message
    # The command make study and make smoke run first says the same.
    assert cli.main(["validate", str(path)]) == 1


def test_validate_command_and_make_targets(capsys):
    assert cli.main(["validate", "config/studies/smoke.yaml"]) == 0
    assert "config/studies/smoke.yaml: valid (study smoke, " in capsys.readouterr().out
    makefile = (REPO_ROOT / "Makefile").read_text()
    for target in ("study", "smoke"):
        recipe = makefile.split(f"\n{target}: ", 1)[1].split("\n\n", 1)[0]
        assert "-m crossover_study validate" in recipe.splitlines()[1], recipe


def test_threads_above_the_cores_of_a_local_run_are_refused(monkeypatch):
    config = validate_config(with_value(("devices",), {"cpu": {"threads": 64}, "cuda": {}}))
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    cores, why = local_cores()
    assert cores == 2 and why == "CPUs in this process's affinity 2"
    assert local_cores(8, None)[0] == 2 and local_cores(1, None) == (
        1,
        "CPUs in this process's affinity 2, --cores 1",
    )
    assert local_cores(None, 1)[0] == 1
    with pytest.raises(ConfigError) as error:
        check_threads(config, *local_cores(2))
    message = str(error.value)
    assert message.startswith("config error at devices.cpu.threads: 64 threads, but a job of ")
    assert "can have 2 cores" in message and "--profile slurm" in message
    check_threads(validate_config(GOOD), 2)  # the default 2 threads fit
    # An unswept device class runs no job.
    unswept = with_value(("devices",), {"cpu": {}, "cuda": {}, "tpu": {"threads": 64}})
    check_threads(validate_config(unswept), 2)


@pytest.mark.slow
def test_snakemake_names_a_duplicate_and_refuses_threads_above_its_cores(tmp_path):
    """Through the workflow: a key given twice stops the dry run with file and lines; a
    local run with more threads than --cores stops before any job (onstart); its dry
    run plans (it may be a cluster study's)."""
    from conftest import run_snakemake

    duplicate = tmp_path / "dup.yaml"
    duplicate.write_text(DUPLICATE_CASE)
    result = run_snakemake(tmp_path, "-n", "--configfile", str(duplicate), check=False)
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "dup.yaml:6:3: config error at cases: 's001-mlp' is given twice" in out
    threads = tmp_path / "threads.yaml"
    study = with_value(("devices",), {"cpu": {"threads": 64}})
    threads.write_text(yaml.safe_dump(with_value(("sweep", "devices"), ["cpu"], study)))
    assert run_snakemake(tmp_path, "-n", "--configfile", str(threads)).returncode == 0
    result = run_snakemake(tmp_path, "--configfile", str(threads), check=False)
    assert result.returncode != 0
    assert "config error at devices.cpu.threads: 64 threads" in result.stdout + result.stderr
    assert not (tmp_path / "results" / "t" / "points").exists()


# Property-based: random study files mutated from the committed ones.

SEEDS = [
    yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text()),
    yaml.safe_load((REPO_ROOT / "config" / "studies" / "smoke.yaml").read_text()),
]

NAMES = st.sampled_from(["study", "cases", "timing", "s001-mlp", "axes", "hidden", "threads"])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["t\n", "x" * 300, "nan", "reference", "paper", "cpu", "s001-mlp", "eager"]),
)
KEYS = st.one_of(
    NAMES,
    st.text(max_size=8),
    st.none(),
    st.booleans(),
    st.integers(-3, 200),
    st.floats(allow_nan=False, allow_infinity=False, width=16),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(KEYS, children, max_size=3)
    ),
    max_leaves=6,
)


def _paths(node, path=()):
    """Every path into ``node`` (keys and list indexes), the empty one included."""
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*path, i))


@st.composite
def study_files(draw):
    """A committed study mutated 1 to 4 times (a value replaced by a wrong type, NaN,
    infinity, a newline, a huge string; a key removed, added unknown or not a string),
    then written as YAML, sometimes with a line doubled (a key given twice)."""
    config = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        paths = list(_paths(config))
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        parent = config
        for key in path[:-1]:
            parent = parent[key]
        if not path:
            if action == "add":
                config[draw(KEYS)] = draw(VALUES)
            continue
        if action == "replace":
            parent[path[-1]] = draw(VALUES)
        elif action == "delete":
            del parent[path[-1]]
        else:
            target = parent[path[-1]]
            if isinstance(target, dict):
                target[draw(KEYS)] = draw(VALUES)
            elif isinstance(target, list):
                target.append(draw(VALUES))
    text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
    if draw(st.booleans()):
        lines = text.splitlines(keepends=True)
        i = draw(st.integers(0, len(lines) - 1))
        lines.insert(i, lines[i])
        text = "".join(lines)
    return text


FOLDER = Path(tempfile.mkdtemp(prefix="hostile-config-"))
ONE_LINE_NAMING_A_KEY = re.compile(r"^(config error at \S|\S+\.yaml:\d+:\d+: (config|YAML) error)")


@settings(
    max_examples=500,
    deadline=None,
    database=None,  # no .hypothesis/ folder in the checkout; a failure prints its blob
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(study_files())
def test_a_random_study_file_is_planned_or_refused_in_one_line(text):
    path = FOLDER / "study.yaml"
    path.write_text(text)
    try:
        config = load_config(path)
    except ConfigError as error:
        message = str(error)
        assert "\n" not in message, message
        assert ONE_LINE_NAMING_A_KEY.match(message), message
        return
    jobs = measure_jobs(config)
    assert all(len(job) == 4 for job in jobs)
    for case, framework, device in study_points.groups(config):
        assert study_points.points(config, case, framework, device)
    assert validate_config(config) == config  # valid stays valid


def test_the_property_test_runs_its_examples_in_ci():
    """hypothesis is pinned (requirements.lock) and the property test above is not
    skipped: at least 500 examples each run."""
    assert test_a_random_study_file_is_planned_or_refused_in_one_line.hypothesis
    assert "hypothesis" in (REPO_ROOT / "requirements.lock").read_text()
    assert sys.modules["hypothesis"].__version__ in (REPO_ROOT / "pyproject.toml").read_text()
