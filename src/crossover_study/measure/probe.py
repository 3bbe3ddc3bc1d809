"""The probe record: what a measuring job was given and what it saw.

Every measuring job writes one JSON record beside its timings table
(``points/<case>/<framework>/<device>/batch-<i>.probe.json``): host, Slurm job id,
partition and node, the CPUs it was given and the threads it used, the GPUs and TPUs
it could see (``CUDA_VISIBLE_DEVICES``, the framework's own device lists), the
framework's version and CUDA build, and the state of the NVIDIA GPUs after the
measurement (and before it, when the job took a snapshot then). The collect step checks every accelerator table against its probe
(:func:`check_table`): an ``ok`` row of ``cuda`` from a job whose probe shows no GPU is
refused, so a lost GPU request (CASES.md P7) cannot turn into a CPU timing under the
GPU's name. The GPU state is recorded, not checked: :func:`check_table` and
:func:`shows_device` decide from the framework's device lists only.

Version 2 added two keys: ``gpu_state``, ``{"start": ..., "end": ...}``, two
:func:`crossover_study.measure.gpu_state.snapshot` results (driver and CUDA driver version,
clocks, memory, power limit and draw, temperature, throttle reasons of every GPU NVML or
nvidia-smi lists; ``start`` is the one the job took before measuring, None when it
passed none; ``end`` is taken when the record is made), and ``gpu_driver_version``
(GPU 0's driver version from ``end``, else ``start``; None without a GPU, and then
``gpu_state["end"]["reason"]`` says why).

Version 3 added the environment the job ran in (:func:`installed_packages`):
``packages``, ``{name: installed version}`` of every package pinned in
``requirements.lock`` that this Python finds (``importlib.metadata``; missing ones left
out), TensorFlow under the name an env installs it by (``tensorflow`` where the lock has
``tensorflow-cpu``) and ``python`` (this interpreter's version); ``python_executable``
(:func:`crossover_study.core.paths.portable_path`: relative to the working directory or the
repository, e.g. ``.snakemake/conda/<hash>/bin/python`` under ``--sdm conda``, never
the machine's absolute path);
and ``packages_outside_prefix``, the recorded packages whose metadata lies outside
``sys.prefix``. Under ``--sdm conda`` a job runs in its env's Python, but Snakemake's
script preamble appends the host's ``sys.path`` to the job's, so a package the env
lacks is imported from the host: such a package is listed there. The manifest carries
``packages`` into each measuring run's record.

Version 4 added what a device probe's verdict depends on (:func:`devices_given`), so
that a measuring job can reuse the rates job's verdict that its device is missing
(:func:`reused_missing`): ``gpu_device_files`` (the ``/dev/nvidia*`` files and
``/dev/kfd``), ``boot_id`` (Linux's id of this boot) and ``device_env_sha256`` (a digest
of this Python, every installed distribution and the GPU library variables). A record of
an earlier version is never reused.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.metadata
import json
import os
import socket
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from crossover_study.core.paths import REPO_ROOT, pins, portable_path
from crossover_study.measure import device_probe, frameworks, gpu_state

#: Format version of the record; bump it when a key changes meaning.
PROBE_VERSION = 4
#: Distributions looked up besides the lock's: names the envs install a locked package
#: by (envs/tensorflow-cuda.yaml and -tpu.yaml install ``tensorflow``, the lock pins
#: ``tensorflow-cpu``; conda-forge's pytorch installs the ``torch`` distribution).
ENV_DISTRIBUTIONS = ("tensorflow",)
#: Slurm variables that tell which GPUs a job was given.
SLURM_GPU_ENV = ("SLURM_GPUS", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE", "GPU_DEVICE_ORDINAL")
#: Environment variables set on TPU hosts (Cloud TPU VMs, Colab).
TPU_ENV = ("TPU_NAME", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID", "COLAB_TPU_ADDR")
#: Fewest devices of its kind a probe must show for ``ok`` rows of a device class.
REQUIRED_DEVICES: dict[str, tuple[str, int]] = {
    "cuda": ("gpus", 1),
    "cuda_multi": ("gpus", 2),
    "tpu": ("tpus", 1),
}


class ProbeError(ValueError):
    """A timings table disagrees with its probe record, or the record is unreadable;
    the message names the files."""


def _int_env(name: str) -> int | None:
    value = os.environ.get(name)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


class CpusNotGivenError(RuntimeError):
    """A measuring job may run on fewer CPUs than the threads it pins its framework to;
    the message names both numbers, the likely cause and what to change."""


def _cpu_list(cpus) -> str:
    """CPU numbers as ranges, as taskset and Slurm write them (``0-3,8``)."""
    ranges: list[list[int]] = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def _fewer_cpus_cause(threads: int, given: int, device: str) -> str:
    """The likely reason a job's affinity holds ``given`` CPUs for ``threads`` threads,
    from what the environment says, and what to do about it."""
    slurm_cpus = _int_env("SLURM_CPUS_PER_TASK")
    on_node = os.cpu_count()
    if os.environ.get("SLURM_JOB_ID") is not None:
        if slurm_cpus is None or slurm_cpus < threads:
            asked = (
                "no --cpus-per-task (1 CPU per task)"
                if slurm_cpus is None
                else f"--cpus-per-task={slurm_cpus}"
            )
            return (
                f"the Slurm job was submitted with {asked} for {threads} threads: its "
                f"sbatch needs --cpus-per-task={threads} "
                "(the measure rule asks for cpus_per_task = threads; a job submitted by hand "
                f"or a profile that overrides it does not), or lower devices.{device}.threads"
            )
        return (
            f"Slurm gave the job {slurm_cpus} CPUs per task, but this process may run on "
            f"{given}: a job step started by srun without --cpus-per-task (Slurm 22.05 and "
            "later no longer pass sbatch's --cpus-per-task on to srun; export "
            "SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK, or call srun --cpus-per-task="
            f"{threads}), or Slurm's CPU binding (--cpu-bind, --hint, the task/affinity or "
            "task/cgroup plugin) binding the task to fewer CPUs than it was given"
        )
    if on_node is not None and on_node < threads:
        return (
            f"more threads than this node has cores ({on_node}): lower "
            f"devices.{device}.threads (Snakemake caps a local job's threads at --cores, a "
            "job started by hand with --threads is not capped)"
        )
    return (
        f"this process's CPU affinity was restricted to {given} of the node's {on_node} "
        "CPUs (taskset, numactl, a container's --cpuset-cpus, a cgroup cpuset, or a Slurm "
        "binding outside a Slurm job's environment): give it at least "
        f"{threads} CPUs, or lower devices.{device}.threads"
    )


def check_cpus_given(threads: int, device: str = "cpu") -> int | None:
    """Compare the CPUs this process may run on (``os.sched_getaffinity(0)``) with the
    ``threads`` its framework is pinned to; return the number of CPUs (None where the
    platform cannot tell).

    Raises :class:`CpusNotGivenError` when there are fewer CPUs than threads: the
    threads would share cores and every timing of the job would be slowed by it. The
    message names both numbers and the likely cause (:func:`_fewer_cpus_cause`: a Slurm
    job given fewer CPUs, ``srun`` without ``--cpus-per-task``, Slurm's CPU binding,
    more threads than the node has cores, a restricted affinity). Checked in the
    measuring job, on the node that measures: the machine that plans the workflow is
    not that node. ``device`` names the config key to change (``devices.<device>``).
    """
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = os.sched_getaffinity(0)
    if len(cpus) >= threads:
        return len(cpus)
    raise CpusNotGivenError(
        f"{threads} threads pinned but this process may run on only {len(cpus)} CPU(s) "
        f"(os.sched_getaffinity: CPUs {_cpu_list(cpus)}); the threads would share cores "
        f"and slow every timing. Likely cause: {_fewer_cpus_cause(threads, len(cpus), device)}. "
        "Nothing was measured; the journal keeps the points measured before."
    )


def installed_packages(lock: str | Path = REPO_ROOT / "requirements.lock") -> dict:
    """The environment of this process: ``{"packages", "python_executable",
    "packages_outside_prefix"}`` (see the module docstring). ``packages`` maps each
    package of ``lock`` (and :data:`ENV_DISTRIBUTIONS`) that ``importlib.metadata``
    finds to its version, and ``python`` to this interpreter's; an unreadable lock
    leaves only what :data:`ENV_DISTRIBUTIONS` finds."""
    try:
        names = list(pins(lock))
    except OSError:
        names = []
    packages = {"python": sys.version.split()[0]}
    outside = []
    prefix = Path(sys.prefix).resolve()
    for name in [*names, *ENV_DISTRIBUTIONS]:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        packages[name] = dist.version
        if not Path(dist.locate_file("")).resolve().is_relative_to(prefix):
            outside.append(name)
    return {
        "packages": packages,
        "python_executable": portable_path(sys.executable),
        "packages_outside_prefix": sorted(outside),
    }


def _framework_devices(framework: str) -> list[str]:
    """Every device the framework lists in this process (its own names)."""
    if framework == "torch":
        return ["cpu", *(f"cuda:{i} {n}" for i, n in enumerate(device_probe.gpu_names("torch")))]
    import tensorflow as tf

    return [d.name for d in tf.config.list_physical_devices()] + [
        d.name for d in tf.config.list_logical_devices("TPU")
    ]


def affinity_cpus() -> int | None:
    """How many CPUs this process may run on (``os.sched_getaffinity``); None where the
    OS does not say (macOS, Windows)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def probe_record(
    framework: str,
    device: str,
    threads: int,
    gpu_start: dict | None = None,
    known: Mapping | None = None,
) -> dict:
    """The probe of this process, as a JSON-ready dict.

    ``threads`` is the number of CPU threads the job pinned its framework to. Imports
    the framework (call it after the measurement, so that neither the thread pinning
    nor the import time is disturbed). CPU counts are integers or None; ``gpus`` and
    ``tpus`` list the device names the framework sees (empty lists when none).
    ``gpu_start`` is the :func:`gpu_state.snapshot` the job took before measuring (None
    when it took none); the record's ``gpu_state`` holds it as ``start`` and a snapshot
    taken now as ``end`` (see the module's docstring); the snapshot never raises.
    ``known``: a probe record whose framework's view (:data:`FRAMEWORK_VIEW`) is copied
    instead of importing the framework (the rates job's, where :func:`reused_missing`
    says its verdict holds for this process).
    """
    gpu_end = gpu_state.snapshot()
    missing = None if known is not None else frameworks.not_importable(framework)
    if known is not None:  # the rates job's view of a missing device (reused_missing)
        framework_view = {key: known.get(key) for key in FRAMEWORK_VIEW}
    elif missing is None:
        seen = device_probe.probe(framework, device)
        framework_view = {
            "gpus": device_probe.gpu_names(framework),
            "tpus": device_probe.tpu_names(framework),
            "framework_devices": _framework_devices(framework),
            # TensorFlow's logical devices (CPU:0, CPU:1, ... when mirrored replicas split
            # the CPU); empty for torch.
            "logical_devices": frameworks.logical_devices(framework),
            "framework_version": seen.framework_version,
            "cuda_build": seen.cuda_version,
            "device_available": seen.available,
            "device_reason": seen.reason,
        }
    else:  # the job's rows say unavailable with the same reason
        framework_view = {
            "gpus": [],
            "tpus": [],
            "framework_devices": [],
            "logical_devices": [],
            "framework_version": None,
            "cuda_build": None,
            "device_available": False,
            "device_reason": missing,
        }
    slurm_cpus = _int_env("SLURM_CPUS_PER_TASK")
    affinity = affinity_cpus()
    cpus_given = slurm_cpus if slurm_cpus is not None else affinity
    return {
        "probe_version": PROBE_VERSION,
        "utc_time": datetime.now(UTC).isoformat(timespec="seconds"),
        "framework": framework,
        "device": device,
        **devices_given(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "slurm_array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID"),
        "partition": os.environ.get("SLURM_JOB_PARTITION"),
        "cpus": {
            "given": cpus_given,
            "threads": threads,
            "slurm_cpus_per_task": slurm_cpus,
            "slurm_cpus_on_node": _int_env("SLURM_CPUS_ON_NODE"),
            "affinity": affinity,
            "os_cpu_count": os.cpu_count(),
        },
        # Under Slurm the framework's threads must be the CPUs the job was given.
        "threads_equal_cpus_given": threads == slurm_cpus if slurm_cpus is not None else None,
        **framework_view,
        "gpu_driver_version": gpu_state.row_columns(gpu_start, gpu_end)["gpu_driver_version"],
        "gpu_state": {"start": gpu_start, "end": gpu_end},
        **installed_packages(),
    }


#: The keys of a probe record that the framework's own view gives (:func:`probe_record`).
FRAMEWORK_VIEW = (
    "gpus",
    "tpus",
    "framework_devices",
    "logical_devices",
    "framework_version",
    "cuda_build",
    "device_available",
    "device_reason",
)


def devices_given() -> dict:
    """What a device probe's verdict depends on besides the framework: the machine
    (``hostname``, Slurm's ``node``, this boot: ``boot_id``) and what the job was given
    of its devices (``cuda_visible_devices``, ``slurm_gpu_env``, ``tpu_env``,
    ``accel_device_files``: the ``/dev/accel*`` files, ``gpu_device_files``: the
    ``/dev/nvidia*`` files and ``/dev/kfd``, which appear when a GPU driver is loaded;
    ``device_env_sha256``: this Python, every installed distribution and the library
    variables, as a digest, :func:`_device_env_digest`).
    Part of every probe record; :func:`reused_missing` compares them. Imports no
    framework."""
    return {
        "hostname": socket.gethostname(),
        "node": os.environ.get("SLURMD_NODENAME"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "slurm_gpu_env": {k: os.environ[k] for k in SLURM_GPU_ENV if k in os.environ},
        "tpu_env": {k: os.environ[k] for k in TPU_ENV if k in os.environ},
        "accel_device_files": sorted(glob.glob("/dev/accel*")),
        "gpu_device_files": sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/kfd")),
        "boot_id": _boot_id(),
        "device_env_sha256": _device_env_digest(),
    }


#: Variables that decide which GPU libraries and devices a framework finds, besides
#: ``CUDA_VISIBLE_DEVICES`` (recorded as it is).
LIBRARY_ENV = ("LD_LIBRARY_PATH", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def _device_env_digest() -> str:
    """sha256 of what else decides whether a framework finds its device: this Python
    (``sys.executable``), every installed distribution's name and version, each once
    however often ``sys.path`` lists its folder (CUDA's own
    wheels, ``nvidia-*``, are not in ``requirements.lock``) and :data:`LIBRARY_ENV`. A
    digest, not the values: probe records are committed with reference runs, and these
    hold the machine's paths."""
    facts = {
        "executable": sys.executable,
        # A set: a Snakemake script's preamble appends Snakemake's own sys.path, so the
        # rates job found every distribution three times where a measuring job found it
        # once, and no missing device was ever reused (2026-12-05).
        "distributions": sorted(
            {f"{d.name}=={d.version}" for d in importlib.metadata.distributions()}
        ),
        "env": {k: os.environ.get(k) for k in LIBRARY_ENV},
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def _boot_id() -> str | None:
    """This boot's id (Linux: ``/proc/sys/kernel/random/boot_id``, new at every boot), or
    None where there is none: a GPU attached or a driver installed since a probe usually
    takes a reboot, and a probe of another boot is never reused (:func:`reused_missing`)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def reused_missing(record: Mapping | None, framework: str, device: str) -> Mapping | None:
    """``record`` (the rates job's probe record of this framework and device, or None)
    where it says the device is missing and this process would see the same: the same
    host, Slurm node and boot, the same ``CUDA_VISIBLE_DEVICES``, Slurm GPU and TPU
    variables, device files, Python, installed distributions and library variables
    (:func:`devices_given`), and the same installed packages (``packages``); else None.
    Never for the CPU, and never for a TPU, whose probe can fail for a while (a TPU that
    another process holds, a remote TPU out of reach). A rates file kept from an earlier
    run is reused as long as nothing of this differs: delete ``rates/`` of the study to
    probe again.

    Whether a device is there is a property of the machine, probed once per study by the
    rates job (:mod:`crossover_study.measure.rates_job`), which runs before every
    measuring job of its framework and device: a measuring job that reuses its verdict
    need not import the framework to find the device missing again (1-3 s a job on the
    2-core VM, 2026-12-05: ``import_s`` 2.0 s for PyTorch, 3.9 s for TensorFlow). A
    device that is there is always probed by the job itself. Never raises."""
    if not isinstance(record, Mapping) or device in ("cpu", "tpu"):
        return None  # a TPU's missing verdict can pass (a TPU another process held)
    if (record.get("framework"), record.get("device")) != (framework, device):
        return None
    if record.get("device_available") is not False or not record.get("device_reason"):
        return None
    if any(record.get(key) != value for key, value in devices_given().items()):
        return None
    return record if record.get("packages") == installed_packages()["packages"] else None


def write_probe(record: Mapping, path: str | Path) -> None:
    """Write ``record`` as indented JSON to ``path`` (temporary file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def load_probe(path: str | Path) -> dict:
    """Read a probe record. Raises :class:`ProbeError` naming ``path`` when it is
    missing, not JSON, or not a record."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ProbeError(f"cannot read probe record {path}: {exc}") from exc
    if not isinstance(record, dict) or "device" not in record:
        raise ProbeError(f"{path} is not a probe record (no 'device' key)")
    return record


def shows_device(record: Mapping, device: str) -> bool:
    """True when the probe ``record`` shows enough devices of class ``device``
    (``cpu``: always; ``cuda``: a GPU; ``cuda_multi``: two GPUs; ``tpu``: a TPU)."""
    if device == "cpu":
        return True
    key, fewest = REQUIRED_DEVICES[device]
    return len(record.get(key) or []) >= fewest


def check_table(rows, record: Mapping, table: str | Path, probe: str | Path) -> None:
    """Refuse a timings table whose accelerator rows the probe does not back.

    ``rows`` is the table (a pandas DataFrame or a list of row dicts with ``device``
    and ``status``). Raises :class:`ProbeError`, naming both files, when the probe was
    written for another device class than a row's, or when a row of an accelerator
    class has ``status=ok`` while the probe shows no such device.
    """
    records = rows.to_dict("records") if hasattr(rows, "to_dict") else list(rows)
    for i, row in enumerate(records):
        device = row.get("device")
        if device != record.get("device"):
            raise ProbeError(
                f"{table}: row {i} is for device {device!r} but its probe {probe} was "
                f"written by a {record.get('device')!r} job"
            )
        if device == "cpu" or row.get("status") != "ok":
            continue
        if not shows_device(record, device):
            key, fewest = REQUIRED_DEVICES[device]
            raise ProbeError(
                f"{table}: row {i} has status ok for device {device!r}, but its probe "
                f"{probe} shows {len(record.get(key) or [])} {key} (at least {fewest} "
                f"needed; host {record.get('hostname')}, partition {record.get('partition')}, "
                f"CUDA_VISIBLE_DEVICES={record.get('cuda_visible_devices')!r}). Refusing to "
                "count a timing that no such device produced."
            )


def check_tables(tables, probes) -> None:
    """:func:`check_table` for each timings CSV and its probe record (same order).

    Raises :class:`ProbeError` for the first disagreement, or when the lists differ in
    length.
    """
    import pandas as pd

    tables, probes = list(tables), list(probes)
    if len(tables) != len(probes):
        raise ProbeError(f"{len(tables)} timings tables but {len(probes)} probe records")
    for table, probe in zip(tables, probes, strict=True):
        check_table(pd.read_csv(table), load_probe(probe), table, probe)
