"""``crossover-study check``: the answer for one model at one size, without Snakemake.

    crossover-study check FILE.py --size batch=32 --size channels=16
        [--framework torch|tensorflow] [--devices cpu,cuda] [--variants eager,compile]
        [--out DIR] [--quick] [--predict t4,h200 | none]
    crossover-study check s001-mlp [--size hidden=128]

What a study does for one case at one size, in one command: an in-memory study config
for that case (the plug-in ``FILE.py`` with the given sizes as its seed, or a seed
case) is validated by :func:`config.validate_config` (every check of a study file,
the plug-in's static checks included) and written to ``<out>/study.yaml``; each device
class is measured by its own ``crossover-study measure-job`` process (the
measure rule's code: journal, point deadline, probe record, step counts), after the
rates job of its framework and device (``crossover-study rates``, the
rates rule's code; its file ``<out>/rates/<framework>/<device>.json`` is the rates the
rows carry);
the per-job tables are collected (:func:`tables.collect_study`), the crossover table,
the device cards' predictions (``predicted.csv``, :mod:`crossover_study.analysis.card_prediction`;
``--predict``), the manifest and the RO-Crate are written as the workflow writes them, so that
``crossover-study audit`` and ``compare`` work on ``<out>``. The answer
(:mod:`crossover_study.answers.check_text`) is printed and written to ``<out>/answer.json``,
and ``<out>/sweep.yaml`` is the study file of the full sweep for a crossover.

A device class asked for but absent (no NVIDIA GPU listed by NVML or nvidia-smi for
``cuda`` and ``cuda_multi``) is said in one line; its rows are ``unavailable`` and no
process is started for it (never a CPU timing under its name). Bad input exits with
status 2 and one line before anything is timed (:class:`CheckError`).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

from crossover_study.core.paths import REPO_ROOT
from crossover_study.core.progress import for_terminal
from crossover_study.reference.gpu_jobs import (
    Progress,
    job_command,
    job_files,
    rates_command,
    rates_files,
    write_benchmark,
    write_unstarted,
)
from crossover_study.study import cases, study_file
from crossover_study.study import config as study_config
from crossover_study.study import points as study_points
from crossover_study.study.applicability import applicability, case_kind
from crossover_study.study.spec import (
    DEVICES,
    FRAMEWORKS,
    PLUGIN_VARIANTS,
    REPLICA_VARIANTS,
    VARIANTS,
)

#: The timing of ``--quick`` (tests, a first look): 3 short blocks, little warm-up, no
#: block-length check. Without ``--quick`` the study's defaults (the schema's) apply.
QUICK_TIMING = {
    "min_block_s": 0.01,
    "blocks": 3,
    "max_warmup_s": 0.1,
    "max_point_s": 1.0,
    "sync_check_s": 0.0,
}
#: Modules whose import in a plug-in file names its framework (:func:`plugin_framework`).
FRAMEWORK_MODULES = {"torch": "torch", "tensorflow": "tensorflow", "keras": "tensorflow"}
#: Device classes that need an NVIDIA GPU, with the GPUs they need.
GPU_CLASSES = {"cuda": 1, "cuda_multi": 2}


class CheckError(ValueError):
    """Bad input to the check (one line: the message); exit status 2, nothing timed."""


def parse_sizes(items: list[str]) -> dict[str, int]:
    """``["batch=32", "channels=16"]`` -> ``{"batch": 32, "channels": 16}`` (positive
    integers). Raises :class:`CheckError` naming a malformed or repeated item."""
    sizes: dict[str, int] = {}
    for item in items:
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=([0-9]+)", item.strip())
        if not match or int(match[2]) < 1:
            raise CheckError(f"--size {item}: expected AXIS=N with N a positive integer")
        if match[1] in sizes:
            raise CheckError(f"--size {item}: {match[1]} given twice")
        sizes[match[1]] = int(match[2])
    return sizes


def case_name(path: Path) -> str:
    """The case name of plug-in file ``path``: its stem in lower case, ``_`` and other
    characters a case name may not hold as ``-`` (``digits_cnn.py`` -> ``digits-cnn``,
    as ``config/studies/own-models.yaml`` names it)."""
    return re.sub(r"[^a-z0-9.]+", "-", path.stem.lower()).strip("-.") or "case"


def plugin_framework(path: Path) -> str | None:
    """The framework plug-in ``path`` imports (``torch``; ``tensorflow`` or ``keras``:
    tensorflow), read from its import statements without importing it; None when it
    imports neither or both."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    found = set()
    for node in ast.walk(tree):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        found |= {
            FRAMEWORK_MODULES[n.split(".")[0]]
            for n in names
            if n.split(".")[0] in FRAMEWORK_MODULES
        }
    return found.pop() if len(found) == 1 else None


def present_devices(snapshot: dict | None = None) -> dict[str, str | None]:
    """``{device class: None when present, else why not}`` for :data:`spec.DEVICES`:
    cpu is always present; cuda needs one NVIDIA GPU and cuda_multi two, as NVML or
    nvidia-smi list them (:func:`gpu_state.snapshot`, no framework imported); tpu is
    never found here (a TPU host is asked for with ``--devices tpu``, and its job's
    probe decides)."""
    from crossover_study.measure.gpu_state import snapshot as gpu_snapshot

    snap = snapshot if snapshot is not None else gpu_snapshot()
    gpus = len(snap.get("gpus") or [])
    found: dict[str, str | None] = {"cpu": None}
    for device, needed in GPU_CLASSES.items():
        found[device] = (
            None
            if gpus >= needed
            else f"{gpus} NVIDIA GPU(s) listed, {needed} needed ({snap.get('reason') or 'none'})"
        )
    found["tpu"] = "no TPU is looked for unless asked (--devices tpu)"
    return found


def default_variants(case: str, framework: str, devices: list[str]) -> list[str]:
    """eager and every variant the study derives from the case's step that applies in
    ``framework`` on at least one of ``devices`` (:func:`applicability.applicability`;
    a plug-in's :data:`spec.PLUGIN_VARIANTS`, a seed's every ordinary variant)."""
    pool = PLUGIN_VARIANTS if not cases.get(case).builtin else VARIANTS
    kind = case_kind(case, framework)
    return [
        v
        for v in pool
        if v not in REPLICA_VARIANTS
        and (
            v == "eager" or any(applicability(v, framework, d, kind, case=case)[0] for d in devices)
        )
    ]


def _names(text: str | None, known, what: str, flag: str) -> list[str] | None:
    """A comma-separated ``--devices``/``--variants`` list, each name known."""
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in known:
            raise CheckError(f"{flag} {text}: unknown {what} {name!r} (known: {', '.join(known)})")
    if not names:
        raise CheckError(f"{flag}: no {what} given")
    return list(dict.fromkeys(names))


def _cards(text: str | None) -> list[str] | None:
    """``--predict t4,h200`` as card names (``none``: no card; None: the study file's
    default, the schema's), each an existing card. Raises :class:`CheckError` naming
    an unknown card and the cards there are."""
    if text is None:
        return None
    if text.strip() == "none":
        return []
    from crossover_study.study.device_cards import card_files

    return _names(text, [p.stem for p in card_files()], "device card", "--predict")


def build_config(args, study: str) -> tuple[dict, str, list[str], dict[str, str]]:
    """The validated study config of the check, its case, the device classes to measure
    and ``{absent device: why}`` (asked for, or left out of the default, and not found
    by :func:`present_devices`). Raises :class:`CheckError` for every bad input."""
    sizes = parse_sizes(args.size)
    devices = _names(args.devices, DEVICES, "device", "--devices")
    variants = _names(args.variants, VARIANTS, "variant", "--variants")
    predict = _cards(args.predict)
    if args.framework is not None and args.framework not in FRAMEWORKS:
        raise CheckError(f"--framework {args.framework}: expected one of {', '.join(FRAMEWORKS)}")
    target = args.target
    if target in cases.SEEDS:
        case = target
        seed = cases.SEEDS[case]
        framework = args.framework or seed.frameworks[0]
        if framework not in seed.frameworks:
            raise CheckError(
                f"--framework {framework}: {case} runs in {', '.join(seed.frameworks)}"
            )
        for axis in sizes:
            if axis not in seed.axes:
                raise CheckError(
                    f"--size {axis}: {case} has no axis {axis!r} (axes: {', '.join(seed.axes)})"
                )
        spec = {"axes": {a: [v] for a, v in sizes.items()}}
    else:
        path = Path(target)
        if not path.is_file():
            hint = "" if target.endswith(".py") else f" nor a seed case ({', '.join(cases.SEEDS)})"
            raise CheckError(f"{target}: no such plug-in file{hint}")
        case = case_name(path)
        framework = args.framework or plugin_framework(path)
        if framework is None:
            raise CheckError(
                f"{target}: imports neither torch nor tensorflow/keras alone; give --framework"
            )
        if not sizes:
            raise CheckError(f"{target}: give the sizes its builder takes, e.g. --size batch=32")
        spec = {"workload": str(path.resolve()), "framework": framework, "seed": sizes}
    if importlib.util.find_spec(framework) is None:
        raise CheckError(f"framework {framework} is not installed in {sys.executable}")
    raw = {
        "study": study,
        "sweep": {"frameworks": [framework], "devices": ["cpu"], "variants": ["eager"]},
        "cases": {case: spec},
    }
    if cases.SEEDS.get(case) is not None and sizes:
        raw["sweep"]["extras_at"] = "all"  # the variants at the sizes given too
    if args.quick:
        raw["timing"] = dict(QUICK_TIMING)
    if predict is not None:
        raw["predict"] = predict
    try:
        study_config.validate_config(raw)  # the case must be known to list its variants
    except study_file.ConfigError as error:
        raise CheckError(str(error)) from None
    present = present_devices()
    if devices is None:
        devices = [d for d in ("cpu", "cuda") if present[d] is None]
        absent = {d: present[d] for d in ("cuda",) if present[d] is not None}
    else:
        absent = {d: present[d] for d in devices if d in GPU_CLASSES and present[d] is not None}
    raw["sweep"]["devices"] = list(dict.fromkeys([*devices, *absent]))
    raw["sweep"]["variants"] = variants or default_variants(case, framework, devices)
    if "cuda_multi" in raw["sweep"]["devices"]:
        raise CheckError("--devices cuda_multi: a check measures no replicated points; use a study")
    try:
        config = study_config.validate_config(raw)
    except study_file.ConfigError as error:
        raise CheckError(str(error)) from None
    return config, case, [d for d in raw["sweep"]["devices"] if d not in absent], absent


def sweep_study(config: dict, case: str, name: str) -> dict:
    """The study file of the full sweep for a crossover of ``case``: each axis at a
    quarter, 1, 4 and 16 times its size, on cpu and cuda, the check's variants and every
    one that applies on cpu or cuda (:func:`default_variants`) at the seed's size
    (``extras_at: seed``), the study's default timing."""
    spec = dict(config["cases"][case])
    seed = spec.get("seed") or cases.seed_sizes(case)
    axes = {a: sorted({max(1, v // 4), v, 4 * v, 16 * v}) for a, v in seed.items()}
    entry = {
        **{k: spec[k] for k in ("workload", "framework", "seed", "entry") if k in spec},
        "axes": axes,
    }
    return {
        "study": name,
        "sweep": {
            "frameworks": config["sweep"]["frameworks"],
            "devices": ["cpu", "cuda"],
            # The check's variants and every one that applies on cpu or cuda.
            "variants": list(
                dict.fromkeys(
                    [
                        *config["sweep"]["variants"],
                        *default_variants(case, config["sweep"]["frameworks"][0], ["cpu", "cuda"]),
                    ]
                )
            ),
            "extras_at": "seed",
        },
        "devices": {"cpu": {"threads": 2}, "cuda": {"threads": 2, "gpu": 1}},
        "cases": {case: entry},
    }


def _measure(config_path: Path, out: Path, job: tuple, progress: Progress) -> float:
    """One measuring job as its own ``crossover-study measure-job`` process
    (the measure rule's code), its progress lines (:func:`progress.for_terminal`) through
    ``progress``; writes the Snakemake-style benchmark file beside the job's log.
    Returns its wall seconds."""
    paths = job_files(out, out / "logs", job)
    wall = _process(job_command(config_path, job, paths), progress)
    write_benchmark(paths["bench"], wall)
    return wall


def _rates(config_path: Path, out: Path, framework: str, device: str, progress: Progress) -> None:
    """The rates job of ``framework`` on ``device`` as its own ``python -m
    crossover_study.measure.rates_job`` process (the rates rule's code), before that pair's
    measuring jobs, which read its file; its benchmark file beside theirs."""
    paths = rates_files(out, out / "logs", framework, device)
    write_benchmark(
        paths["bench"], _process(rates_command(config_path, framework, device, paths), progress)
    )


def _process(cmd: list, progress: Progress) -> float:
    """Run ``cmd`` with this repository's ``src`` first on its path, passing its point
    lines and failures through ``progress``. Returns its wall seconds."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    started = time.time()
    with subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        for line in proc.stdout:
            line = line.rstrip("\n")
            if for_terminal(line):
                progress.line(line)
    return time.time() - started


def _unstarted(config: dict, out: Path, job: tuple, why: str) -> None:
    """The table and probe record of an absent device's job: ``unavailable`` rows
    saying ``why`` (:func:`crossover_study.reference.gpu_jobs.write_unstarted`), no process started."""
    case, framework, device, batch = job
    paths = job_files(out, out / "logs", job)
    points = study_points.batches(config, case, framework, device)[batch]
    threads = config["devices"][device]["threads"]
    # Its probe record lists the framework's devices (an import here, nothing timed):
    # what the framework's C++ side writes to stderr at import (TensorFlow's absl and
    # oneDNN lines) goes to the job's log, as a measuring job's does.
    with _fd_stderr_to(paths["log"]):
        write_unstarted(points, paths, study_points.measurement_hash(config, case), threads, why)
    write_benchmark(paths["bench"], 0.0)


@contextlib.contextmanager
def _fd_stderr_to(path: Path):
    """File descriptor 2 appended to ``path`` inside the block (restored after).
    Hand-rolled: :func:`contextlib.redirect_stderr` moves only Python's ``sys.stderr``,
    not what a framework's C++ code writes to the descriptor itself."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "a") as log:
            os.dup2(log.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def run_check(config: dict, case: str, absent: dict[str, str], out: Path, workdir: Path) -> dict:
    """Measure, collect, answer and record the check in ``out`` (see the module
    docstring); prints one line per point and the answer. Returns the answer (dict)."""
    from crossover_study.analysis.card_prediction import write_predictions
    from crossover_study.analysis.crossover import write_crossover
    from crossover_study.analysis.tables import collect_study
    from crossover_study.answers.check_text import answer, answer_lines
    from crossover_study.provenance.crate import write_crate
    from crossover_study.provenance.manifest import unreported_manifest, write_json
    from crossover_study.study.device_cards import load_cards

    out.mkdir(parents=True, exist_ok=True)
    config_path = out / "study.yaml"
    config_path.write_text(
        "# The check's study config as validated (crossover-study check).\n"
        + yaml.safe_dump(config, sort_keys=False)
    )
    sweep_path = out / "sweep.yaml"
    sweep_path.write_text(
        "# The full sweep for a crossover of this case (crossover-study check wrote it).\n"
        + yaml.safe_dump(sweep_study(config, case, f"{case}-sweep"), sort_keys=False)
    )
    for device, why in absent.items():
        print(
            f"{device}: absent on this machine ({why}); not measured, never timed on the CPU",
            flush=True,
        )
    jobs = study_points.measure_jobs(config)
    measured = [j for j in jobs if j[2] not in absent]
    total = sum(len(study_points.batches(config, *j[:3])[j[3]]) for j in measured)
    progress = Progress(total, time.time())
    rated = set()
    for job in jobs:
        if job[2] in absent:
            _unstarted(config, out, job, f"not visible on this machine: {absent[job[2]]}")
            continue
        if job[1:3] not in rated:  # once per framework and device, before its jobs
            _rates(config_path, out, job[1], job[2], progress)
            rated.add(job[1:3])
        _measure(config_path, out, job, progress)
    files = [job_files(out, out / "logs", j) for j in jobs]
    done = [f for f in files if f["csv"].is_file() and f["probe"].is_file()]
    if not done:
        raise RuntimeError(f"no measuring job wrote its table; see {out / 'logs'}")
    timings, _, _ = collect_study(
        [f["csv"] for f in done],
        [f["probe"] for f in done],
        [f["bench"] for f in done],
        out / "timings.csv",
        out / "wall.json",
        merge_environments=config["merge_environments"],
        noise_threshold=config["timing"]["noise_threshold"],
    )
    crossover = write_crossover(
        out / "timings.csv",
        out / "crossover.csv",
        n_boot=config["crossover"]["bootstrap"],
        seed=config["crossover"]["seed"],
    )
    # The accelerators on the study's device cards, predicted, written apart.
    predicted, _ = write_predictions(
        out / "timings.csv",
        load_cards(config["predict"]),
        out / "predicted.csv",
        out / "predicted_crossover.csv",
    )
    result = answer(timings, crossover, case, absent, sweep_path, predicted=predicted)
    write_json(result, out / "answer.json")
    manifest = unreported_manifest(
        config,
        config_path,
        workdir,
        out,
        point_tables=[f["csv"] for f in done],
        probe_records=[f["probe"] for f in done],
        extra={"check": {"answer": "answer.json", "sweep_study": "sweep.yaml"}},
    )
    write_json(manifest, out / "manifest.json")
    write_crate(
        manifest,
        workdir=workdir,
        out=out / "ro-crate-metadata.json",
        manifest_path=out / "manifest.json",
    )
    for line in answer_lines(result):
        print(line, flush=True)
    print(f"wrote {out} (timings.csv, answer.json, manifest.json; crossover-study audit {out})")
    return result


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Command line (see the module docstring). Returns 0, 2 for bad input (one line on
    stderr, nothing timed), 1 when no job wrote its table."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="a plug-in file (FILE.py) or a seed case (s001-mlp)")
    parser.add_argument(
        "--size",
        action="append",
        default=[],
        metavar="AXIS=N",
        help="a size the builder takes (repeat per axis)",
    )
    parser.add_argument("--framework", help="torch or tensorflow (default: what the file imports)")
    parser.add_argument(
        "--devices", help="comma-separated device classes (default: every one present)"
    )
    parser.add_argument(
        "--variants", help="comma-separated variants (default: eager and every one that applies)"
    )
    parser.add_argument("--out", help="output folder (default: results/check-<case>-<UTC time>/)")
    parser.add_argument(
        "--quick", action="store_true", help="short timing (3 short blocks, no block-length check)"
    )
    parser.add_argument(
        "--predict",
        metavar="CARDS",
        help="comma-separated device cards to predict the step on (default: t4,a100-80gb,h100-sxm; "
        "none: no prediction; crossover-study devices lists them)",
    )
    args = parser.parse_args(argv)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        name = case_name(Path(args.target)) if args.target not in cases.SEEDS else args.target
        config, case, _, absent = build_config(args, f"check-{name}-{stamp}")
    except CheckError as error:
        print(f"{prog or 'check'}: {error}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path("results") / config["study"]
    out = out.resolve()
    cwd = Path.cwd().resolve()
    workdir = cwd if out.is_relative_to(cwd) and out != cwd else out.parent
    try:
        run_check(config, case, absent, out, workdir)
    except RuntimeError as error:
        print(f"{prog or 'check'}: {error}", file=sys.stderr)
        return 1
    return 0
