"""The study file before and around its schema: reading it (:func:`read_yaml`: a key
given twice, a YAML syntax error named with file, line and column), the checks JSON
Schema has no keyword for (every key text, every number finite, the reserved study
names) and the threads a local run's jobs can have (:func:`check_threads`). The schema
validation itself, and the cross-checks of cases and replication, are
:mod:`crossover_study.study.config`'s."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from crossover_study.core.paths import shown_path


class ConfigError(ValueError):
    """The study config is invalid; the message names the key path and the bad value."""


#: Study names refused (compared case-insensitively): ``results/reference/`` holds the
#: committed reference runs and ``reports/paper/`` the paper figures drawn from them, so
#: a study of that name would write into them.
RESERVED_STUDY_NAMES: tuple[str, ...] = ("reference", "paper")


def key_path(path) -> str:
    """``a.b[1].c``; a key that is not a plain name (a newline, a space, a bracket) is
    written as its repr in brackets (``cases['x\\n']``), so the path stays one line."""
    text = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            text += f"[{part}]"
        elif isinstance(part, str) and re.fullmatch(r"[A-Za-z0-9_.-]+", part):
            text += f".{part}" if text else part
        else:
            text += f"[{part!r}]"
    return text or "<top level>"


def shown(value) -> str:
    """A config value as YAML writes it where that differs from Python (null, true,
    .nan), else its repr: one line."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, float) and not math.isfinite(value):
        return {math.inf: ".inf", -math.inf: "-.inf"}.get(value, ".nan")
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}..."


#: What YAML made of a key that is not text, in YAML's words.
_YAML_KINDS = {
    "NoneType": "null",
    "bool": "a boolean",
    "int": "an integer",
    "float": "a number",
    "date": "a date",
    "datetime": "a timestamp",
    "tuple": "a sequence",
}


def check_keys_and_numbers(node, path=()) -> None:
    """Walk the whole config before the schema sees it: every mapping key is text (YAML
    reads ``null:``, ``true:``, ``123:``, ``1.5:`` as other types, which would reach
    file names and regular expressions) and every number is finite (jsonschema's
    ``minimum`` and ``exclusiveMinimum`` let NaN through, and no setting means infinity:
    ``point_deadline_s: null`` is "no deadline"). Raises :class:`ConfigError` naming the
    key path. Hand-rolled: JSON Schema has no keyword for either."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            if not isinstance(key, str):
                kind = _YAML_KINDS.get(type(key).__name__, type(key).__name__)
                raise ConfigError(
                    f"config error at {key_path(path)}: key {shown(key)} is read by YAML as "
                    f"{kind}, not as a name (names are letters, digits, _ . -; quote one "
                    "that YAML would read otherwise)"
                )
            check_keys_and_numbers(value, (*path, key))
    elif isinstance(node, list | tuple):
        for i, value in enumerate(node):
            check_keys_and_numbers(value, (*path, i))
    elif isinstance(node, float) and not math.isfinite(node):
        raise ConfigError(f"config error at {key_path(path)}: {shown(node)} is not a finite number")


def _check_duplicates(loader: yaml.SafeLoader, node, source, path=(), seen=None) -> None:
    """Refuse a key given twice in one mapping of the composed YAML ``node`` (PyYAML
    keeps the last silently), naming both lines. Each node is walked once (anchors,
    recursive aliases); a merge key (``<<``) may be overridden, as YAML allows."""
    seen = set() if seen is None else seen
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        marks = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = loader.construct_object(key_node, deep=True)
            try:
                first = marks.setdefault(key, key_node.start_mark)
            except TypeError:  # an unhashable key: construct_document names it
                continue
            if first is not key_node.start_mark:
                mark = key_node.start_mark
                raise ConfigError(
                    f"{source}:{mark.line + 1}:{mark.column + 1}: config error at "
                    f"{key_path(path)}: {shown(key)} is given twice (lines {first.line + 1} "
                    f"and {mark.line + 1}); YAML would keep only the last"
                )
            _check_duplicates(loader, value_node, source, (*path, key), seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_duplicates(loader, item, source, (*path, i), seen)


def read_yaml(path: str | Path) -> Any:
    """The YAML file ``path`` as Python data (as ``yaml.safe_load`` reads it), refusing
    what ``safe_load`` lets through or reports without a place: a key given twice in
    one mapping (both lines named), and syntax errors as one line ``FILE:LINE:COLUMN:
    YAML error: ...`` (bad indentation, an unclosed bracket or quote, a tab). Raises
    :class:`ConfigError`, also for a file that cannot be read."""
    source = shown_path(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config {source}: {exc}") from None
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        _check_duplicates(loader, node, source)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        what = " ".join(str(exc.problem or exc.context or "invalid YAML").split())
        if exc.context and exc.problem and exc.context_mark:
            what += f" ({exc.context} at line {exc.context_mark.line + 1})"
        raise ConfigError(f"{where}: YAML error: {what}") from None
    except yaml.YAMLError as exc:  # the reader's errors (a control character) have no mark
        raise ConfigError(f"{source}: YAML error: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ConfigError(f"{source}: YAML error: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()


def check_config_files(paths: Sequence[str | Path]) -> None:
    """Read each study file with :func:`read_yaml` (Snakemake has read them already,
    keeping the last of a key given twice): raises :class:`ConfigError` with the file,
    line and column of a duplicate key, or of a file that is not a mapping."""
    for path in paths:
        if not isinstance(read_yaml(path), dict | type(None)):
            raise ConfigError(f"{path}:1:1: a study file is a mapping of keys to values")


def local_cores(cores: int | None = None, max_threads: int | None = None) -> tuple[int, str]:
    """The CPUs one job of a local run can have, and what limits them (text for a
    message): this process's affinity (``os.sched_getaffinity``; ``os.cpu_count`` where
    there is none), and Snakemake's ``--cores`` and ``--max-threads`` when given
    (Snakemake lowers a job's threads to them without a word)."""
    if hasattr(os, "sched_getaffinity"):
        limits = [(len(os.sched_getaffinity(0)), "CPUs in this process's affinity")]
    else:
        limits = [(os.cpu_count() or 1, "CPUs on this machine")]
    limits += [(n, f"--{flag}") for n, flag in ((cores, "cores"), (max_threads, "max-threads"))]
    limits = [(n, why) for n, why in limits if n is not None]
    return min(n for n, _ in limits), ", ".join(f"{why} {n}" for n, why in limits)


def check_threads(config: Mapping[str, Any], cores: int, source: str = "") -> None:
    """Refuse a swept device class whose ``threads`` exceed ``cores``, the CPUs a job of
    a local run can have (:func:`local_cores`; ``source`` says what limits them). Raises
    :class:`ConfigError` naming ``devices.<class>.threads``. Not for a cluster executor:
    there a job's cores are its node's, and the job checks them itself before measuring
    (:func:`crossover_study.measure.probe.check_cpus_given`)."""
    for device in config["sweep"]["devices"]:
        threads = config["devices"][device]["threads"]
        if threads > cores:
            limits = f" ({source})" if source else ""
            raise ConfigError(
                f"config error at devices.{device}.threads: {threads} threads, but a job of "
                f"this local run can have {cores} cores{limits} and Snakemake would run it "
                f"with {cores}; give at most {cores}, or run where a job gets {threads} (on "
                "a cluster, --profile slurm, each job checks its node's cores itself)"
            )
