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
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from crossover_study.measure import device_probe, frameworks
from crossover_study.measure.probe import check_cpus_given, probe_record, write_probe
from crossover_study.stepmodel import rates as step_rates
from crossover_study.study.spec import DEVICES

#: Version of the rates file's layout.
RATES_VERSION = 1


def rates_job(
    framework: str,
    device: str,
    threads: int,
    out: str | Path,
    log_path: str | Path | None = None,
    echo: Callable[[str], None] | None = None,
) -> dict:
    """Measure the rates of ``framework`` (``torch`` or ``tensorflow``) on ``device`` (a
    device class: ``cpu``, ``cuda``, ``cuda_multi``, ``tpu``) with ``threads`` CPU
    threads, in this process, and write them to ``out`` (JSON, atomically; layout in the
    module docstring). Returns what it wrote.

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
        record.update(_measured(framework, device, threads, say))
        record["wall_s"] = time.time() - started
        record["probe"] = probe_record(framework, device, threads)
        write_probe(record, out)  # indented JSON, temporary file + rename
        say(f"rates {framework}/{device}: wrote {out} ({record['wall_s']:.1f} s)")
        return record
    finally:
        if log is not None:
            log.close()


def _measured(framework: str, device: str, threads: int, say) -> dict:
    """``available``, ``reason`` or ``rates``/``seconds`` (or ``error``) of
    :func:`rates_job`."""
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
    frameworks.initialise_device(framework, device)
    try:
        rates = step_rates.measure_rates(framework, device)
    except Exception as exc:  # noqa: BLE001 - the file says why; the measuring jobs go on
        say(f"rates {framework}/{device}: not measured ({type(exc).__name__}: {exc})")
        return {"available": True, "rates": None, "seconds": None, "error": f"{exc}"}
    seconds = rates.pop("seconds")
    say(f"rates {framework}/{device}: {step_rates.row_columns(rates)} ({seconds:.2f} s)")
    return {"available": True, "rates": rates, "seconds": seconds}


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
        )
    except Exception as exc:  # noqa: BLE001 - one line, the log has the rest
        print(f"rates job failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0
