"""The state of the node's NVIDIA GPUs around a measurement: clocks, power, throttling.

A GPU timing depends on more than the GPU's name: the driver, the clocks the GPU ran at,
its power limit and whether it was throttled. :func:`snapshot` reads them, through NVML
(the ``pynvml`` module of PyPI's ``nvidia-ml-py``, imported lazily) or, when NVML is
unusable, through one ``nvidia-smi --query-gpu`` call; the probe record keeps one
snapshot from before the measurement and one from after it (``probe.probe_record``),
and :func:`row_columns` reduces the two to the few values a timings row carries.

Neither source honours ``CUDA_VISIBLE_DEVICES``: a snapshot lists every GPU NVML can
see, in NVML's order (under Slurm with device cgroups, only the job's GPUs).
"""

from __future__ import annotations

import csv
import shutil
import subprocess
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

#: Throttle ("clock event") reasons: our name and the suffix of NVML's constant, which
#: nvml.h defines as ``nvmlClocksEventReason<suffix>`` (``nvmlClocksThrottleReason<suffix>``
#: before the rename; pynvml exposes both names). ``board_limit`` and ``reliability``
#: exist only under the older name. The deprecated alias ``UserDefinedClocks`` (the same
#: bit as ``ApplicationsClocksSetting``) is left out.
REASONS: tuple[tuple[str, str], ...] = (
    ("gpu_idle", "GpuIdle"),
    ("applications_clocks_setting", "ApplicationsClocksSetting"),
    ("sw_power_cap", "SwPowerCap"),
    ("hw_slowdown", "HwSlowdown"),
    ("sync_boost", "SyncBoost"),
    ("sw_thermal_slowdown", "SwThermalSlowdown"),
    ("hw_thermal_slowdown", "HwThermalSlowdown"),
    ("hw_power_brake_slowdown", "HwPowerBrakeSlowdown"),
    ("display_clock_setting", "DisplayClockSetting"),
    ("board_limit", "BoardLimit"),
    ("reliability", "Reliability"),
)
#: Bit of each reason, used only when pynvml cannot be imported (the nvidia-smi path):
#: the values of ``nvmlClocksThrottleReason*`` in pynvml.py of nvidia-ml-py 13.615.71,
#: which copies nvml.h. With pynvml, :func:`reason_bits` reads them from the module.
FALLBACK_REASON_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
    "board_limit": 0x200,
    "reliability": 0x400,
}
#: Seconds one nvidia-smi call may take.
SMI_TIMEOUT_S = 5
#: nvidia-smi's name of the active throttle mask: the current one first, then the name
#: older drivers know (a second call is made only when the first one fails).
SMI_REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _mb(value: Any) -> int:
    """MiB of a byte count (rounded down)."""
    return int(value) // 2**20


def _watts(milliwatts: Any) -> float:
    return int(milliwatts) / 1000


def _cuda_version(value: Any) -> str:
    """``"major.minor"`` of NVML's CUDA driver version, an int 1000 * major + 10 * minor
    (nvml.h's NVML_CUDA_DRIVER_VERSION_MAJOR / _MINOR macros)."""
    value = int(value)
    return f"{value // 1000}.{value % 1000 // 10}"


#: nvidia-smi --query-gpu fields (with --format=csv,noheader,nounits): key of the GPU
#: dict, nvidia-smi's field name, conversion of its text. Units as in :func:`snapshot`.
SMI_FIELDS: tuple[tuple[str, str, Callable[[str], Any]], ...] = (
    ("index", "index", int),
    ("name", "name", str),
    ("uuid", "uuid", str),
    ("driver_version", "driver_version", str),
    ("memory_total_mib", "memory.total", lambda v: int(float(v))),
    ("memory_used_mib", "memory.used", lambda v: int(float(v))),
    (
        "persistence_mode",
        "persistence_mode",
        lambda v: {"enabled": True, "disabled": False}[v.lower()],
    ),
    ("sm_clock_mhz", "clocks.sm", lambda v: int(float(v))),
    ("mem_clock_mhz", "clocks.mem", lambda v: int(float(v))),
    ("max_sm_clock_mhz", "clocks.max.sm", lambda v: int(float(v))),
    ("power_limit_w", "enforced.power.limit", float),
    ("power_draw_w", "power.draw", float),
    ("temperature_c", "temperature.gpu", lambda v: int(float(v))),
)
#: Keys of each GPU of a snapshot, in this order.
GPU_KEYS: tuple[str, ...] = (
    "index",
    "name",
    "uuid",
    "driver_version",
    "cuda_driver_version",
    "memory_total_mib",
    "memory_used_mib",
    "persistence_mode",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "max_sm_clock_mhz",
    "power_limit_w",
    "power_draw_w",
    "temperature_c",
    "throttle_mask",
    "throttle_reasons",
)


def reason_bits(nvml: Any = None) -> dict[str, int]:
    """Bit of each reason name of :data:`REASONS`.

    Read from the ``pynvml`` module ``nvml`` (``nvmlClocksEventReason<suffix>``, else
    ``nvmlClocksThrottleReason<suffix>``); a name the module lacks, or every name when
    ``nvml`` is None, takes its bit from :data:`FALLBACK_REASON_BITS`.
    """
    bits = {}
    for name, suffix in REASONS:
        value = None
        for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
            candidate = getattr(nvml, prefix + suffix, None) if nvml is not None else None
            if isinstance(candidate, int) and not isinstance(candidate, bool):
                value = candidate
                break
        bits[name] = value if value is not None else FALLBACK_REASON_BITS[name]
    return bits


def decode_reasons(mask: int, bits: Mapping[str, int] | None = None) -> list[str]:
    """Names of the reasons set in the throttle bitmask ``mask``, by increasing bit.

    ``bits`` maps names to bits (default: :func:`reason_bits` without pynvml). A set bit
    no name has becomes ``unknown_0x<bit>``. An empty list means the GPU reported no
    reason (NVML's ``nvmlClocksEventReasonNone``, 0).
    """
    bits = dict(bits) if bits is not None else reason_bits()
    names = [name for name, bit in sorted(bits.items(), key=lambda kv: kv[1]) if mask & bit]
    rest = mask & ~sum(set(bits.values()))
    bit = 1
    while rest >= bit:
        if rest & bit:
            names.append(f"unknown_{bit:#x}")
        bit <<= 1
    return names


def _try(read: Callable[[], Any], convert: Callable[[Any], Any] = lambda v: v) -> Any:
    """``convert(read())``, or None when either raises (one field of one GPU)."""
    try:
        return convert(read())
    except Exception:
        return None


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class _Unusable(Exception):
    """A source cannot be read at all; the message says why."""


def _nvml_gpus() -> list[dict]:
    """Every GPU NVML lists. Raises :class:`_Unusable` when pynvml is missing or NVML
    does not initialise or cannot count its GPUs."""
    try:
        import pynvml as nvml
    except ImportError:
        raise _Unusable("pynvml not installed") from None
    try:
        nvml.nvmlInit()
    except Exception as exc:
        raise _Unusable(f"nvmlInit failed: {_why(exc)}") from None
    try:
        try:
            count = nvml.nvmlDeviceGetCount()
        except Exception as exc:
            raise _Unusable(f"nvmlDeviceGetCount failed: {_why(exc)}") from None
        bits = reason_bits(nvml)
        driver = _try(nvml.nvmlSystemGetDriverVersion, _text)
        cuda = _try(nvml.nvmlSystemGetCudaDriverVersion, _cuda_version)
        # Enum values of nvml.h as pynvml exposes them.
        sm, mem = nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM
        temp_sensor, enabled = nvml.NVML_TEMPERATURE_GPU, nvml.NVML_FEATURE_ENABLED
        gpus = []
        for i in range(count):
            handle = _try(lambda i=i: nvml.nvmlDeviceGetHandleByIndex(i))
            if handle is None:  # nothing of this GPU can be read
                gpus.append({key: i if key == "index" else None for key in GPU_KEYS})
                continue
            memory = _try(lambda h=handle: nvml.nvmlDeviceGetMemoryInfo(h))
            mask = _throttle_mask(nvml, handle)
            gpu = {
                "index": i,
                "name": _try(lambda h=handle: nvml.nvmlDeviceGetName(h), _text),
                "uuid": _try(lambda h=handle: nvml.nvmlDeviceGetUUID(h), _text),
                "driver_version": driver,
                "cuda_driver_version": cuda,
                "memory_total_mib": _try(lambda m=memory: m.total, _mb),
                "memory_used_mib": _try(lambda m=memory: m.used, _mb),
                "persistence_mode": _try(
                    lambda h=handle: nvml.nvmlDeviceGetPersistenceMode(h), lambda v: v == enabled
                ),
                "sm_clock_mhz": _try(lambda h=handle: nvml.nvmlDeviceGetClockInfo(h, sm), int),
                "mem_clock_mhz": _try(lambda h=handle: nvml.nvmlDeviceGetClockInfo(h, mem), int),
                "max_sm_clock_mhz": _try(
                    lambda h=handle: nvml.nvmlDeviceGetMaxClockInfo(h, sm), int
                ),
                "power_limit_w": _try(
                    lambda h=handle: nvml.nvmlDeviceGetEnforcedPowerLimit(h), _watts
                ),
                "power_draw_w": _try(lambda h=handle: nvml.nvmlDeviceGetPowerUsage(h), _watts),
                "temperature_c": _try(
                    lambda h=handle: nvml.nvmlDeviceGetTemperature(h, temp_sensor), int
                ),
                "throttle_mask": mask,
                "throttle_reasons": decode_reasons(mask, bits) if mask is not None else None,
            }
            gpus.append(gpu)
        return gpus
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _throttle_mask(nvml: Any, handle: Any) -> int | None:
    """The active throttle bitmask of one GPU: NVML's current function name first, then
    the one older pynvml and drivers have; None when neither answers."""
    for name in (
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
    ):
        read = getattr(nvml, name, None)
        if read is None:
            continue
        try:
            return int(read(handle))
        except Exception:
            continue
    return None


def _smi_value(text: str, convert: Callable[[str], Any]) -> Any:
    text = text.strip()
    if not text or text.startswith("[") or text.upper() == "N/A":  # [N/A], [Not Supported]
        return None
    return _try(lambda: text, convert)


def _smi_mask(text: str) -> int | None:
    return _smi_value(text, lambda v: int(v, 16))


def _smi_gpus() -> list[dict]:
    """Every GPU nvidia-smi lists (one call; a second with the older name of the throttle
    field when the first fails). Raises :class:`_Unusable` naming what went wrong."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        raise _Unusable("not on PATH")
    failures = []
    for reason_field in SMI_REASON_FIELDS:
        query = ",".join([*(field for _, field, _ in SMI_FIELDS), reason_field])
        try:
            done = subprocess.run(
                [exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=SMI_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise _Unusable(f"no answer within {SMI_TIMEOUT_S} s") from None
        except OSError as exc:
            raise _Unusable(f"cannot run {exe}: {exc}") from None
        if done.returncode == 0:
            return _parse_smi(done.stdout)
        said = " ".join((done.stdout + done.stderr).split())[:300]
        failures.append(f"{reason_field}: exit {done.returncode}: {said}")
    raise _Unusable("; ".join(failures))


def _parse_smi(stdout: str) -> list[dict]:
    """GPU dicts from nvidia-smi's CSV lines (fields of :data:`SMI_FIELDS`, then the
    throttle mask in hex). Raises :class:`_Unusable` when a line has the wrong number of
    fields. Reason bits come from pynvml when it imports (NVML itself being unusable),
    else from :data:`FALLBACK_REASON_BITS`."""
    try:
        import pynvml as nvml
    except ImportError:
        nvml = None
    bits = reason_bits(nvml)
    gpus = []
    for cells in csv.reader(
        (line for line in stdout.splitlines() if line.strip()), skipinitialspace=True
    ):
        if len(cells) != len(SMI_FIELDS) + 1:
            raise _Unusable(f"{len(cells)} fields instead of {len(SMI_FIELDS) + 1}: {cells}")
        pairs = zip(SMI_FIELDS, cells[:-1], strict=True)
        gpu = {key: _smi_value(cell, convert) for (key, _, convert), cell in pairs}
        mask = _smi_mask(cells[-1])
        gpu["cuda_driver_version"] = None  # --query-gpu has no field for it
        gpu["throttle_mask"] = mask
        gpu["throttle_reasons"] = decode_reasons(mask, bits) if mask is not None else None
        gpus.append({key: gpu[key] for key in GPU_KEYS})
    return gpus


def snapshot() -> dict:
    """The state of every NVIDIA GPU this process can see, now. Never raises.

    Returns ``{"source", "utc_time", "gpus", "reason"}``: ``source`` is ``"nvml"``,
    ``"nvidia-smi"`` (NVML unusable: pynvml missing, ``nvmlInit`` or the device count
    failing) or None (neither could be read); ``utc_time`` ISO 8601 to the second;
    ``reason`` None when a source answered, else why nothing could be read, naming each
    source tried (e.g. ``"NVML: pynvml not installed; nvidia-smi: not on PATH"``), or
    that the source answered with no GPU.

    Each GPU is a dict with the keys of :data:`GPU_KEYS`: ``index`` (NVML's order, not
    CUDA's), ``name``, ``uuid``, ``driver_version`` (text), ``cuda_driver_version`` (the
    CUDA version the driver supports, ``"12.4"``; None from nvidia-smi, which does not
    report it), ``memory_total_mib`` / ``memory_used_mib`` (MiB; NVML's bytes // 2**20),
    ``persistence_mode`` (bool), ``sm_clock_mhz`` / ``mem_clock_mhz`` (current SM and
    memory clocks, MHz), ``max_sm_clock_mhz`` (MHz), ``power_limit_w`` (the enforced
    power limit, W; NVML's milliwatts / 1000), ``power_draw_w`` (W), ``temperature_c``
    (GPU core, degrees C), ``throttle_mask`` (NVML's active clock event / throttle
    reasons bitmask, int) and ``throttle_reasons`` (its names, :func:`decode_reasons`;
    ``[]`` when the GPU reports none). A field that cannot be read is None; the rest of
    the GPU is still read. NVML is always shut down after it was initialised.
    """
    utc_time = datetime.now(UTC).isoformat(timespec="seconds")
    tried = []
    for source, read in (("nvml", _nvml_gpus), ("nvidia-smi", _smi_gpus)):
        label = "NVML" if source == "nvml" else source
        try:
            gpus = read()
        except _Unusable as exc:
            tried.append(f"{label}: {exc}")
            continue
        except Exception as exc:  # a bug or a surprise of the source: never raise
            tried.append(f"{label}: {type(exc).__name__}: {exc}")
            continue
        reason = None if gpus else f"{label}: no GPU listed"
        return {"source": source, "utc_time": utc_time, "gpus": gpus, "reason": reason}
    return {"source": None, "utc_time": utc_time, "gpus": [], "reason": "; ".join(tried)}


def _first_gpu(snap: Mapping | None) -> Mapping | None:
    gpus = (snap or {}).get("gpus") or []
    return gpus[0] if gpus else None


def row_columns(start: Mapping | None, end: Mapping | None) -> dict:
    """The GPU columns of a timings row from a job's snapshots before and after measuring.

    Returns ``{"gpu_driver_version", "gpu_sm_clock_mhz", "gpu_throttle_reasons"}``:
    the driver version (text) and the current SM clock (MHz) of GPU 0 in ``end``, else
    in ``start``; the union of GPU 0's throttle reasons at start and end, sorted and
    joined with ``+`` (``"none"`` when it reported none). Each is None when neither
    snapshot has a GPU (or the field could not be read). Either snapshot may be None.

    GPU 0 is the first GPU of the snapshot, i.e. NVML's first GPU. It is the process's
    first CUDA device only when the orders agree: NVML does not apply
    ``CUDA_VISIBLE_DEVICES``, and CUDA's default order (fastest first) can differ from
    NVML's (PCI bus). Each GPU's ``uuid`` is recorded so that a reader can match them
    (``nvidia-smi -L``, ``torch.cuda.get_device_properties(i).uuid``). A snapshot taken
    while the GPU is idle (before or after the measurement) shows the idle clock and,
    typically, the ``gpu_idle`` reason.
    """
    first_start, first_end = _first_gpu(start), _first_gpu(end)

    def latest(key: str) -> Any:
        for gpu in (first_end, first_start):
            if gpu is not None and gpu.get(key) is not None:
                return gpu[key]
        return None

    reasons = [gpu.get("throttle_reasons") for gpu in (first_start, first_end) if gpu]
    reasons = [r for r in reasons if r is not None]
    if reasons:
        union = sorted(set().union(*reasons))
        throttle = "+".join(union) if union else "none"
    else:
        throttle = None
    driver = latest("driver_version")
    return {
        "gpu_driver_version": str(driver) if driver is not None else None,
        "gpu_sm_clock_mhz": latest("sm_clock_mhz"),
        "gpu_throttle_reasons": throttle,
    }
