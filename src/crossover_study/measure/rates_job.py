"""The rates job: the machine's rates for one framework, device and thread count, once.

The step-time model (:mod:`crossover_study.stepmodel.model`) prices a step at rates that are
properties of the machine, the framework and the thread count, not of a point
(:func:`crossover_study.stepmodel.rates.measure_rates`: op costs, FLOP and bandwidth curves,
DRAM, the page-fault price, Keras fit's own costs). The workflow's ``rates`` rule
(``workflow/scripts/rates.py``) measures them once per (framework, device) of a study,
before its measuring jobs, with :func:`rates_job`; ``crossover-study rates``
does the same from a command line (``crossover-study check`` and the GPU reference run
start one such process per framework and device). A measuring job reads the file
(:func:`read_rates`) and writes its rates into every row
(:func:`crossover_study.stepmodel.rates.row_columns`) and its probe record.

The file (JSON) holds ``available`` (false, with ``reason``, when the framework does not
import or the device is not visible: nothing is timed then, never a CPU timing under an
accelerator's name), ``framework``, ``device``, ``threads``, ``rates`` (each ``{"median",
"iqr", "blocks"[, "unit"]}``: its spread), ``seconds`` (measuring them), ``wall_s`` (the
whole job, import included) and ``probe``: the probe record of the process that measured
them (:func:`crossover_study.measure.probe.probe_record`).

Rates are reused across studies: ``key`` (:func:`rates_key`) names what they depend on
(the machine's host name, CPU model, logical CPUs and affinity, the framework and its
version, the device class, the threads, Python's version, the rates file's layout and the
sha256 of the code that measures them). A job given earlier studies' folders
(``reuse_from``: ``results/``; the config's ``rates.reuse``, on by default) copies the
newest file there whose ``key`` and device availability match instead of timing again,
and says so: ``reused_from`` holds that file's path, sha256 and the time its rates were
measured (its probe's ``utc_time``), so that the audit and a reader can tell reused rates
from measured ones. ``rates.reuse: false`` measures afresh.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from crossover_study.core.files import sha256_file
from crossover_study.core.origin import cpu_model
from crossover_study.measure import device_probe, frameworks
from crossover_study.measure.probe import (
    affinity_cpus,
    check_cpus_given,
    probe_record,
    write_probe,
)
from crossover_study.stepmodel import rates as step_rates
from crossover_study.study.spec import DEVICES

#: Version of the rates file's layout.
RATES_VERSION = 1


def rate_code() -> list[Path]:
    """The source files that measure the rates: :mod:`crossover_study.stepmodel.rates` and
    the modules it times with (``timing``, ``faults``, ``fit_rates``), sorted."""
    folder = Path(step_rates.__file__).parent
    return sorted(folder / f"{name}.py" for name in ("rates", "timing", "faults", "fit_rates"))


def rates_key(framework: str, framework_version: str | None, device: str, threads: int) -> str:
    """The identity of a rates measurement (64 hex digits, sha256 of a JSON object): this
    machine (host name, :func:`crossover_study.core.origin.cpu_model`, logical CPUs, this
    process's CPU affinity), ``framework`` at ``framework_version``, the device class
    ``device``, ``threads``, Python's version, :data:`RATES_VERSION` and the sha256 of
    each source file that measures them (:func:`rate_code`; rates measured by other code
    are not these). Two files with one key hold rates of one machine, framework and
    thread count measured the same way."""
    facts = {
        "rates_version": RATES_VERSION,
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "affinity": affinity_cpus(),
        "framework": framework,
        "framework_version": framework_version,
        "device": device,
        "threads": threads,
        "python": platform.python_version(),
        "code_sha256": [sha256_file(path) for path in rate_code()],
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def earlier_rates(key: str, folders, out: str | Path) -> tuple[Path, dict] | None:
    """The newest rates file under the folders ``folders`` (each searched as
    ``*/rates/*/*.json``: the studies of a ``results/`` folder) whose ``key`` is ``key``
    and that holds rates (not ``available: false``, not an error, not itself reused: a
    copy names the file measured), other than ``out``; None when there is none. Newest
    by its probe's ``utc_time``. Files that are not JSON are passed over."""
    found = []
    target = Path(out).resolve()
    for folder in folders:
        for path in sorted(Path(folder).glob("*/rates/*/*.json")):
            if path.resolve() == target:
                continue
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if (
                isinstance(record, dict)
                and record.get("key") == key
                and record.get("rates")
                and not record.get("reused_from")
            ):
                found.append((str((record.get("probe") or {}).get("utc_time") or ""), path, record))
    if not found:
        return None
    _, path, record = max(found, key=lambda f: f[0])
    return path, record


def rates_job(
    framework: str,
    device: str,
    threads: int,
    out: str | Path,
    log_path: str | Path | None = None,
    echo: Callable[[str], None] | None = None,
    reuse_from=(),
) -> dict:
    """Measure the rates of ``framework`` (``torch`` or ``tensorflow``) on ``device`` (a
    device class: ``cpu``, ``cuda``, ``cuda_multi``, ``tpu``) with ``threads`` CPU
    threads, in this process, and write them to ``out`` (JSON, atomically; layout in the
    module docstring). Returns what it wrote. ``reuse_from``: folders of earlier studies
    (``results/``) whose rates of the same ``key`` are copied instead of timed
    (:func:`earlier_rates`; empty: always measure).

    Pins the threads and imports the framework as a measuring job does
    (:func:`frameworks.pin_thread_env`, :func:`frameworks.import_framework`), probes
    and initialises the device (:func:`frameworks.probe`,
    :func:`frameworks.initialise_device`), then times
    :func:`step_rates.measure_rates`. A framework that does not import or a device that
    is not visible gives ``available: false`` and the reason, quickly, with nothing
    timed. A failure while timing gives ``available: true``, ``rates: null`` and the
    ``error``: the measuring jobs then leave their rate columns empty. Every line it logs
    is appended to ``log_path`` (when given) and passed to ``echo``. Raises
    :class:`probe.CpusNotGivenError` when the process may run on fewer CPUs than
    ``threads`` (nothing written), as a measuring job does.
    """
    started = time.time()
    if log_path is not None:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "a") if log_path is not None else None  # noqa: SIM115 - closed below

    def say(text: str) -> None:
        if log is not None:
            print(text, file=log, flush=True)
        if echo is not None:
            echo(text)

    try:
        cpus = check_cpus_given(threads, device)
        say(f"rates {framework}/{device}: {cpus} CPU(s) for {threads} thread(s)")
        record = {
            "rates_version": RATES_VERSION,
            "framework": framework,
            "device": device,
            "threads": threads,
        }
        record.update(_measured(framework, device, threads, say, reuse_from, out))
        record["wall_s"] = time.time() - started
        record["probe"] = probe_record(framework, device, threads)
        write_probe(record, out)  # indented JSON, temporary file + rename
        say(f"rates {framework}/{device}: wrote {out} ({record['wall_s']:.1f} s)")
        return record
    finally:
        if log is not None:
            log.close()


def _measured(framework: str, device: str, threads: int, say, reuse_from=(), out=None) -> dict:
    """``available``, ``reason`` or ``key`` and ``rates``/``seconds`` (or ``error``), and
    ``reused_from`` for rates copied from an earlier study, of :func:`rates_job`."""
    frameworks.pin_thread_env(threads)
    try:
        frameworks.import_framework(framework, device, threads)
    except ImportError as exc:
        reason = frameworks.not_importable(framework, exc)
        say(f"rates {framework}/{device}: not measured: {reason}")
        return {"available": False, "reason": reason, "rates": None, "seconds": None}
    probe = device_probe.probe(framework, device)
    if not probe.available:
        say(f"rates {framework}/{device}: not measured: {probe.reason}")
        return {"available": False, "reason": probe.reason, "rates": None, "seconds": None}
    key = rates_key(framework, probe.framework_version, device, threads)
    earlier = earlier_rates(key, reuse_from, out) if reuse_from else None
    if earlier is not None:
        path, record = earlier
        source = {
            "path": path.as_posix(),
            "sha256": sha256_file(path),
            "measured_utc": (record.get("probe") or {}).get("utc_time"),
        }
        say(f"rates {framework}/{device}: reused from {source['path']} (same key {key[:12]})")
        return {
            "available": True,
            "key": key,
            "rates": record["rates"],
            "seconds": record.get("seconds"),
            "reused_from": source,
        }
    frameworks.initialise_device(framework, device)
    try:
        rates = step_rates.measure_rates(framework, device)
    except Exception as exc:  # noqa: BLE001 - the file says why; the measuring jobs go on
        say(f"rates {framework}/{device}: not measured ({type(exc).__name__}: {exc})")
        return {"available": True, "key": key, "rates": None, "seconds": None, "error": f"{exc}"}
    seconds = rates.pop("seconds")
    say(f"rates {framework}/{device}: {step_rates.row_columns(rates)} ({seconds:.2f} s)")
    return {"available": True, "key": key, "rates": rates, "seconds": seconds}


def rates_probe(path: str | Path | None) -> dict | None:
    """The probe record inside the rates file ``path`` (:func:`rates_job`'s ``probe``),
    or None: no path, a file that is missing, not JSON or without a probe. Never
    raises."""
    if path is None:
        return None
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    probe = record.get("probe") if isinstance(record, dict) else None
    return probe if isinstance(probe, dict) else None


def read_rates(
    path: str | Path | None, framework: str, device: str, threads: int
) -> tuple[dict | None, str]:
    """The rates a measuring job of ``framework`` on ``device`` with ``threads`` threads
    uses from the rates file ``path`` (:func:`rates_job`), in
    :func:`step_rates.measure_rates`' form (``seconds`` included), and a line for its log
    saying where they came from or why there are none: no file given, a file that is
    missing or not JSON, rates not measured (``available`` false, an error), or rates of
    another framework, device or thread count (a rate measured with other threads is not
    this job's). Never raises."""
    if path is None:
        return None, "rates: none (no rates file given); the rows' rate columns stay empty"
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        return None, f"rates: none ({path}: {exc}); the rows' rate columns stay empty"
    if not isinstance(record, dict):
        return None, f"rates: none ({path} is not a rates file); the rows' rate columns stay empty"
    theirs = (record.get("framework"), record.get("device"), record.get("threads"))
    if theirs != (framework, device, threads):
        return None, (
            f"rates: none ({path} holds {theirs[0]}/{theirs[1]} at {theirs[2]} threads, not "
            f"{framework}/{device} at {threads}); the rows' rate columns stay empty"
        )
    if not record.get("rates"):
        why = record.get("reason") or record.get("error") or "not measured"
        return None, f"rates: none ({path}: {why}); the rows' rate columns stay empty"
    return {**record["rates"], "seconds": record.get("seconds")}, f"rates: from {path}"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Command line: one rates job (see the module docstring). Exits 2 with one line for
    bad arguments, 1 when the job fails."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", required=True, choices=sorted(frameworks.FRAMEWORK_MODULES))
    parser.add_argument("--device", required=True, choices=DEVICES)
    parser.add_argument("--threads", type=int, help="default: devices.<device>.threads of --config")
    parser.add_argument("--config", help="study config (YAML or JSON) giving the threads")
    parser.add_argument("--out", required=True, help="the rates file (JSON)")
    parser.add_argument("--log", help="the job's log (appended)")
    parser.add_argument("--echo", action="store_true", help="also print each log line")
    parser.add_argument(
        "--reuse-from",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder of earlier studies (results/) whose rates of the same key are copied "
        "instead of timed (repeatable; default: none, measure)",
    )
    args = parser.parse_args(argv)
    threads = args.threads
    if threads is None:
        if args.config is None:
            parser.error("give --threads or --config")
        import yaml

        from crossover_study.study import config as study_config
        from crossover_study.study import study_file

        try:
            config = study_config.validate_config(yaml.safe_load(Path(args.config).read_text()))
            threads = config["devices"][args.device]["threads"]
        except (OSError, study_file.ConfigError) as exc:
            parser.error(str(exc))
        except KeyError:
            parser.error(f"--device {args.device!r}: not a device class of {args.config}")
    if threads < 1:
        parser.error(f"--threads must be at least 1, got {threads}")
    try:
        rates_job(
            args.framework,
            args.device,
            threads,
            args.out,
            args.log,
            echo=(lambda text: print(text, flush=True)) if args.echo else None,
            reuse_from=args.reuse_from,
        )
    except Exception as exc:  # noqa: BLE001 - one line, the log has the rest
        print(f"rates job failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0
