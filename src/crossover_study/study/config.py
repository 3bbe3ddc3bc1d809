"""Load and validate a study config; its expansion into measurement points and jobs is
:mod:`crossover_study.study.points`; reading the study file and the checks its schema
cannot express are :mod:`crossover_study.study.study_file`.

Validation uses jsonschema against ``workflow/schemas/config.schema.yaml`` (filling
each property's ``default``, as ``snakemake.utils.validate`` does). We call jsonschema
directly rather than ``snakemake.utils.validate`` so that the error is one line naming
the key path (``cases.s000-hjb.axes.batch[1]``) and so that tests need no workflow.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from crossover_study.core.columns import STUDY_TABLES
from crossover_study.core.origin import SCHEMAS, table_columns
from crossover_study.core.paths import REPO_ROOT
from crossover_study.study import cases as case_registry
from crossover_study.study.device_cards import CardError, card_files, load_card_file
from crossover_study.study.programs import classified
from crossover_study.study.spec import REPLICA_VARIANTS, seed_sizes
from crossover_study.study.study_file import (
    RESERVED_STUDY_NAMES,
    ConfigError,
    check_keys_and_numbers,
    key_path,
    read_yaml,
    shown,
)

__all__ = [
    "SCHEMA_PATH",
    "PLUGIN_KEYS",
    "load_config",
    "schema_default",
    "validate_config",
]

SCHEMA_PATH = SCHEMAS / "config.schema.yaml"


def _schema_key() -> tuple[str, int]:
    """The schema file and its modification time: the caches below read it again when
    it changes."""
    return str(SCHEMA_PATH), SCHEMA_PATH.stat().st_mtime_ns


@functools.lru_cache(maxsize=4)
def _schema(path: str, mtime_ns: int) -> dict:
    """The config schema, parsed once (PyYAML takes tens of milliseconds over it, and
    the workflow and the tests validate many configs). Read-only: never modified."""
    return yaml.safe_load(Path(path).read_text())


@functools.lru_cache(maxsize=4)
def _validator(path: str, mtime_ns: int):
    """A jsonschema validator of :func:`_schema` that fills in defaults."""
    return _with_defaults(jsonschema.Draft202012Validator)(_schema(path, mtime_ns))


def _with_defaults(validator_class):
    """jsonschema's documented recipe for filling ``default`` values while validating."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _pattern_message(error: jsonschema.ValidationError) -> str:
    """A pattern error with the pattern as people write it (``$`` for the
    ``(?![\\s\\S])`` that keeps a trailing newline out) and the line break named."""
    pattern = error.validator_value.replace(r"(?![\s\S])", "$")
    breaks = " (a name is one line: no line breaks)" if "\n" in error.instance else ""
    return f"{shown(error.instance)} does not match {pattern}{breaks}"


def _schema_error(error: jsonschema.ValidationError) -> ConfigError:
    where = key_path(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        return ConfigError(
            f"config error at {where}: unknown key(s) {', '.join(map(repr, extra))}; "
            f"allowed: {', '.join(allowed)}"
        )
    if error.validator == "uniqueItems":
        items = error.instance
        dups = sorted({repr(x) for x in items if items.count(x) > 1})
        return ConfigError(
            f"config error at {where}: duplicate value(s) {', '.join(dups)} in {items}"
        )
    if error.validator == "enum":
        return ConfigError(
            f"config error at {where}: {error.instance!r} is not one of {error.validator_value}"
        )
    key = error.absolute_path[-1] if error.absolute_path else None
    if error.validator == "pattern" and key in ("slurm_partition", "slurm_account"):
        return ConfigError(
            f"config error at {where}: {shown(error.instance)} is not one name (no commas, "
            "spaces or line breaks: one partition and one account per device class)"
        )
    name = "key name " if "propertyNames" in error.relative_schema_path else ""
    if error.validator == "pattern":
        return ConfigError(f"config error at {where}: {name}{_pattern_message(error)}")
    if error.validator == "maxLength":
        return ConfigError(
            f"config error at {where}: {name}{shown(error.instance)} is "
            f"{len(error.instance)} characters long (at most {error.validator_value})"
        )
    if error.validator == "not" and where.startswith("devices."):
        return ConfigError(
            f"config error at {where}: give gpu (with an optional gpu_model) or gres, not both"
        )
    return ConfigError(f"config error at {where}: {error.message.replace(chr(10), ' ')}")


def validate_config(config: Mapping[str, Any], study_dirs: Sequence[str | Path] = ()) -> dict:
    """Validate ``config`` and return a copy with every default filled in; make its
    cases the active case registry (:func:`crossover_study.study.cases.use`).

    Raises :class:`ConfigError` naming the first bad key path (unknown names or keys,
    non-positive or duplicate sizes, a swept device that ``devices`` does not define,
    grid axes a case does not have, a GPU count that is not a positive integer, a
    partition or account with a comma or space, threads and cpus_per_task that differ,
    a variant the program table does not classify, and for a case of the user's own a
    plug-in that is missing, lacks its entry point or does not take an axis:
    :func:`_check_cases`).

    ``study_dirs``: folders a plug-in's ``workload`` path may be relative to (the study
    file's), searched before the repository root and the working directory; the
    validated config stores the file relative to the repository root or the working
    directory when it lies inside one (so validating it again finds it from there),
    else as an absolute path (:func:`crossover_study.study.cases.stored_path`).

    A device class that gives ``cpus_per_task`` but not ``threads`` gets
    ``threads = cpus_per_task``: a job's framework threads are the CPUs Slurm gives it.
    """
    check_keys_and_numbers(config)
    config = copy.deepcopy(dict(config))
    raw_devices = config.get("devices")
    given = {
        name: set(spec) if isinstance(spec, Mapping) else set()
        for name, spec in (raw_devices.items() if isinstance(raw_devices, Mapping) else ())
    }
    validator = _validator(*_schema_key())
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        error = jsonschema.exceptions.best_match(errors)
        raise _schema_error(error)
    if config["study"].casefold() in RESERVED_STUDY_NAMES:
        raise ConfigError(
            f"config error at study: {config['study']!r} is the name of a committed folder "
            f"(results/reference/, reports/paper/: {', '.join(RESERVED_STUDY_NAMES)} are "
            "not study names); name the study otherwise"
        )
    for i, device in enumerate(config["sweep"]["devices"]):
        if device not in config["devices"]:
            raise ConfigError(
                f"config error at sweep.devices[{i}]: device {device!r} is not defined "
                f"under devices (defined: {', '.join(config['devices'])})"
            )
    _check_cases(config, [*study_dirs, REPO_ROOT, Path.cwd()])
    case_registry.use(config)
    _check_replication(config)
    for i, variant in enumerate(config["sweep"]["variants"]):
        if not classified(variant):
            raise ConfigError(
                f"config error at sweep.variants[{i}]: variant {variant!r} has no entry in "
                "the program table (src/crossover_study/study/programs.py), so its rows could not "
                "say which program ran nor be compared with the CPU's"
            )
    # Each seed's own accelerators are predicted too, unless the study predicts nothing.
    if config["predict"]:
        own = [
            d.card
            for name in config["cases"]
            if name in case_registry.SEEDS
            for d in case_registry.SEEDS[name].own_devices
        ]
        config["predict"] = list(dict.fromkeys([*config["predict"], *own]))
    _check_predict(config["predict"])
    for name, spec in config["devices"].items():
        if "cpus_per_task" not in spec:
            continue
        if "threads" in given.get(name, ()) and spec["threads"] != spec["cpus_per_task"]:
            raise ConfigError(
                f"config error at devices.{name}: threads ({spec['threads']}) and "
                f"cpus_per_task ({spec['cpus_per_task']}) differ; a job's framework threads "
                "must equal the CPUs Slurm gives it (give one of them, or equal values)"
            )
        spec["threads"] = spec["cpus_per_task"]
    return config


def _check_predict(names: Sequence[str]) -> None:
    """Every card ``predict`` names exists and validates
    (:func:`crossover_study.study.device_cards.load_cards`); raises :class:`ConfigError`
    naming ``predict[i]`` and the cards there are."""
    known = {p.stem: p for p in card_files()}
    for i, name in enumerate(names):
        if name not in known:
            raise ConfigError(
                f"config error at predict[{i}]: no device card {name!r} (cards: "
                f"{', '.join(sorted(known))}; crossover-study devices lists them)"
            )
        try:
            load_card_file(known[name])
        except CardError as error:
            raise ConfigError(f"config error at predict[{i}]: {error}") from error


def _check_replication(config: Mapping[str, Any]) -> None:
    """Cross-checks of the ``replication`` section the schema cannot express: its cases
    must be measured (under ``cases``) and its devices swept (in ``sweep.devices``); at
    least one variant's framework must be swept; on ``cpu`` a replica needs a core of its own
    (replicas <= ``devices.cpu.threads``); strong scaling must split each case's seed
    batch evenly; ``cuda_multi`` runs replicated points only, so sweeping it needs the
    section to list it."""
    rep = config.get("replication")
    devices = config["sweep"]["devices"]
    if "cuda_multi" in devices and (rep is None or "cuda_multi" not in rep["devices"]):
        raise ConfigError(
            "config error at sweep.devices: cuda_multi runs only replicated points (ddp, "
            "mirrored, mirrored_fit); add a replication section with devices: "
            "[cuda_multi], or drop cuda_multi from sweep.devices"
        )
    if rep is None:
        return
    default = schema_default("replication", "cases")
    for i, case in enumerate(rep["cases"]):
        if case not in config["cases"]:
            raise ConfigError(
                f"config error at replication.cases[{i}]: case {case!r} is not under cases "
                f"(measured: {', '.join(config['cases'])}); replicated points are measured "
                "at a case's seed size, so the case must be in the study (replication.cases "
                f"defaults to [{', '.join(default)}] when left out)"
            )
    owners = {REPLICA_VARIANTS[v] for v in rep["variants"]}
    if not owners & set(config["sweep"]["frameworks"]):
        # One variant of an unswept framework gives not_applicable rows, as sweep.variants
        # do; none that can run at all is a mistake.
        raise ConfigError(
            f"config error at replication.variants: [{', '.join(rep['variants'])}] belong to "
            f"{', '.join(sorted(owners))}, but sweep.frameworks is "
            f"[{', '.join(config['sweep']['frameworks'])}]: no replicated point could run"
        )
    cores = config["devices"].get("cpu", {}).get("threads")
    if "cpu" in rep["devices"] and cores is not None:
        for i, replicas in enumerate(rep["replicas"]):
            if replicas > cores:
                raise ConfigError(
                    f"config error at replication.replicas[{i}]: {replicas} replicas on cpu "
                    f"exceed devices.cpu.threads ({cores}); each CPU replica needs a core "
                    "of its own"
                )
    if "strong" in rep["scaling"]:
        for case in rep["cases"]:
            batch = seed_sizes(case).get("batch")
            if batch is None:  # a case without a batch axis has no replicated points
                continue
            for i, replicas in enumerate(rep["replicas"]):
                if batch % replicas:
                    raise ConfigError(
                        f"config error at replication.replicas[{i}]: strong scaling splits "
                        f"{case}'s seed batch {batch} over the replicas, and {replicas} "
                        "does not divide it"
                    )
    for i, device in enumerate(rep["devices"]):
        if device not in config["sweep"]["devices"]:
            raise ConfigError(
                f"config error at replication.devices[{i}]: device {device!r} is not in "
                f"sweep.devices ({', '.join(config['sweep']['devices'])}); add it there"
            )


#: Keys a seed case's entry may not give: its program, framework and seed size are the
#: registry's (:data:`crossover_study.study.cases.SEEDS`).
PLUGIN_KEYS: tuple[str, ...] = ("workload", "entry", "framework", "question", "seed")


def reserved_axis_names() -> dict[str, str]:
    """``{column: table}``: every column of the study's tables
    (:data:`crossover_study.core.columns.STUDY_TABLES`, as their schemas in
    ``workflow/schemas/`` document them) but the seeds' own axes, with the first table
    that has it. A case of the user's own may not name an axis so: each table carries a
    point's sizes as columns beside its own (a long table's ``op``, ``steps``, ``m``,
    ``n``, ``k``, ...), and an axis of the same name would overwrite one of them."""
    seed_axes = {a for c in case_registry.SEEDS.values() for a in c.axes}
    reserved: dict[str, str] = {}
    for table in STUDY_TABLES:
        for column in table_columns(table):
            if column not in seed_axes:
                reserved.setdefault(column, table)
    return reserved


def _check_cases(config: dict, search: Sequence[str | Path]) -> None:
    """Cross-checks of the ``cases`` section the schema cannot express, in place: a seed
    case gives only ``axes`` and ``grid``, over its own axes; a case of the user's own
    gives ``workload``, ``framework`` and ``seed``, its framework is swept, every axis of
    ``axes`` has a seed size, no axis is named like another column of the timings
    table, and its plug-in file exists and defines its entry point taking ``device`` and
    every axis (:func:`crossover_study.study.cases.check_plugin`, without importing it); its
    ``workload`` is replaced by the stored path (:func:`crossover_study.study.cases.stored_path`).
    A ``grid`` names two axes of the case; ``skip_variants`` names variants of
    ``sweep.variants`` or ``replication.variants`` other than ``eager``."""
    seeds = case_registry.SEEDS
    reserved = reserved_axis_names()
    for name, spec in config["cases"].items():
        where = f"config error at cases.{name}"
        if name in seeds:
            given = [k for k in PLUGIN_KEYS if k in spec]
            if given:
                raise ConfigError(
                    f"{where}.{given[0]}: {name} is a seed case; its program, framework, "
                    "question and seed size are built in (give a case of your own a name "
                    "of its own)"
                )
            own_axes = seeds[name].axes
            extra = sorted(set(spec["axes"]) - set(own_axes))
            if extra:
                raise ConfigError(
                    f"{where}.axes: unknown key(s) {', '.join(map(repr, extra))}; "
                    f"allowed: {', '.join(own_axes)}"
                )
        else:
            for key in ("workload", "framework", "seed"):
                if key not in spec:
                    hint = (
                        f"{name!r} is not a seed case ({', '.join(seeds)}) and gives no "
                        "workload: the plug-in file of a case of your own (README, 'Measure "
                        "your own model')"
                        if key == "workload"
                        else f"a case of your own needs {key} (docs/PLUGINS.md)"
                    )
                    raise ConfigError(f"{where}: {hint}")
            if spec["framework"] not in config["sweep"]["frameworks"]:
                raise ConfigError(
                    f"{where}.framework: {spec['framework']} is not in sweep.frameworks "
                    f"({', '.join(config['sweep']['frameworks'])}): the case would measure "
                    "nothing"
                )
            for axis in spec["seed"]:
                if axis in reserved:
                    raise ConfigError(
                        f"{where}.seed.{axis}: {axis!r} is a column of the study's "
                        f"{reserved[axis]} table (workflow/schemas/{reserved[axis]}.schema.yaml), "
                        "beside which every point's sizes are written; name the axis otherwise"
                    )
            for axis in spec["axes"]:
                if axis not in spec["seed"]:
                    raise ConfigError(
                        f"{where}.axes.{axis}: axis {axis!r} has no seed size (cases.{name}."
                        f"seed gives {', '.join(spec['seed'])}); the seed's own size is "
                        "always measured, so every axis needs one"
                    )
            try:
                path = case_registry.resolve_workload(name, spec["workload"], search)
                case_registry.check_plugin(
                    name, path, spec.get("entry", case_registry.DEFAULT_ENTRY), spec["seed"]
                )
            except case_registry.PluginError as error:
                raise ConfigError(str(error)) from None
            spec["workload"] = case_registry.stored_path(path)
            own_axes = tuple(spec["seed"])
        for i, axis in enumerate(spec.get("grid", ())):
            if axis not in own_axes:
                raise ConfigError(
                    f"{where}.grid[{i}]: {axis!r} is not an axis of {name} "
                    f"(axes: {', '.join(own_axes)})"
                )
        for i, point in enumerate(spec.get("points", ())):
            for axis in point:
                if axis not in own_axes:
                    raise ConfigError(
                        f"{where}.points[{i}].{axis}: {axis!r} is not an axis of {name} "
                        f"(axes: {', '.join(own_axes)})"
                    )
        replicated = (config.get("replication") or {}).get("variants", ())
        measured = [*config["sweep"]["variants"], *replicated]
        for i, variant in enumerate(spec.get("skip_variants", ())):
            if variant == "eager" or variant not in measured:
                why = (
                    "eager is the baseline of every curve and is always measured"
                    if variant == "eager"
                    else "it is not in sweep.variants or replication.variants "
                    f"({', '.join(measured)})"
                )
                raise ConfigError(f"{where}.skip_variants[{i}]: cannot skip {variant!r}: {why}")


def schema_default(*path: str):
    """The ``default`` of the config schema's property at ``path`` (e.g.
    ``("replication", "cases")``). Raises KeyError for a path the schema lacks."""
    node = _schema(*_schema_key())
    for name in path:
        node = node["properties"][name]
    return copy.deepcopy(node["default"])


def load_config(path: str | Path) -> dict:
    """Read a YAML study config (:func:`read_yaml`: a duplicate key or a syntax error is
    named with its file, line and column) and :func:`validate_config` it (a plug-in's
    ``workload`` may be relative to the file's folder). Raises ConfigError for a missing
    or unparsable file too."""
    path = Path(path)
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(
            f"config error at <top level>: the study file {path} must be a mapping of keys "
            f"to values, got {type(raw).__name__}"
        )
    return validate_config(raw, study_dirs=[path.parent])
