"""GPU state snapshots: NVML first, one nvidia-smi call when NVML is unusable, a reason
when neither answers; the per-row values; the probe record's gpu_state. Both sources are
faked, so these tests assert the same on machines with and without a GPU."""

import json
import sys
import types

import pytest

from crossover_study.measure import frameworks, gpu_state
from crossover_study.measure.gpu_state import (
    FALLBACK_REASON_BITS,
    GPU_KEYS,
    REASONS,
    decode_reasons,
    reason_bits,
    row_columns,
    snapshot,
)
from crossover_study.measure.probe import PROBE_VERSION, probe_record

GPU_IDLE, SW_POWER_CAP = FALLBACK_REASON_BITS["gpu_idle"], FALLBACK_REASON_BITS["sw_power_cap"]


class FakeNVMLError(Exception):
    """Stands for pynvml.NVMLError."""


#: What the fake NVML reports per GPU: (name, uuid, SM MHz, memory MHz, max SM MHz,
#: enforced power limit mW, power draw mW or None for NVMLError, temperature, mask).
FAKE_GPUS = (
    (b"NVIDIA H200", "GPU-aaaa", 1980, 3201, 1980, 700_000, 123_456, 35, GPU_IDLE | SW_POWER_CAP),
    ("NVIDIA H200", "GPU-bbbb", 345, 3201, 1980, 600_000, None, 30, 0),
)


def fake_pynvml(calls: list, init_error: str | None = None) -> types.ModuleType:
    """A module with the pynvml functions gpu_state calls, reporting FAKE_GPUS; each
    call of nvmlInit / nvmlShutdown is appended to ``calls``."""
    m = types.ModuleType("pynvml")
    m.NVMLError = FakeNVMLError
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM = 1, 2  # pynvml's values
    m.NVML_TEMPERATURE_GPU, m.NVML_FEATURE_ENABLED = 0, 1
    for name, suffix in REASONS:
        setattr(m, f"nvmlClocksThrottleReason{suffix}", FALLBACK_REASON_BITS[name])

    def init():
        calls.append("init")
        if init_error:
            raise FakeNVMLError(init_error)

    def power(h):
        if FAKE_GPUS[h][6] is None:
            raise FakeNVMLError("Not Supported")
        return FAKE_GPUS[h][6]

    m.nvmlInit = init
    m.nvmlShutdown = lambda: calls.append("shutdown")
    m.nvmlSystemGetDriverVersion = lambda: "570.124.06"
    m.nvmlSystemGetCudaDriverVersion = lambda: 12080
    m.nvmlDeviceGetCount = lambda: len(FAKE_GPUS)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: FAKE_GPUS[h][0]
    m.nvmlDeviceGetUUID = lambda h: FAKE_GPUS[h][1]
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(
        total=143771 * 2**20, used=(512 + h) * 2**20, free=0
    )
    m.nvmlDeviceGetPersistenceMode = lambda h: 1 - h
    m.nvmlDeviceGetClockInfo = lambda h, t: FAKE_GPUS[h][2] if t == 1 else FAKE_GPUS[h][3]
    m.nvmlDeviceGetMaxClockInfo = lambda h, t: FAKE_GPUS[h][4]
    m.nvmlDeviceGetEnforcedPowerLimit = lambda h: FAKE_GPUS[h][5]
    m.nvmlDeviceGetPowerUsage = power
    m.nvmlDeviceGetTemperature = lambda h, sensor: FAKE_GPUS[h][7]
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: FAKE_GPUS[h][8]
    return m


@pytest.fixture
def no_smi(tmp_path, monkeypatch):
    """PATH holds only an empty folder: no nvidia-smi."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.fixture
def nvml_calls(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(calls))
    return calls


SMI_LINES = (
    "0, NVIDIA H100 80GB HBM3, GPU-cccc, 550.54.15, 81559, 1, Enabled, 1755, 2619, 1980, "
    "700.00, 71.25, 33, 0x0000000000000005\n"
    "1, NVIDIA H100 80GB HBM3, GPU-dddd, 550.54.15, 81559, 0, Disabled, 345, 2619, 1980, "
    "700.00, [N/A], 29, 0x0000000000000000\n"
)


def fake_smi(tmp_path, monkeypatch, script_body: str):
    """An executable ``nvidia-smi`` in a folder put first on PATH; it appends its
    arguments to args.txt and runs ``script_body``; pynvml is made unimportable."""
    folder = tmp_path / "bin"
    folder.mkdir()
    args = tmp_path / "args.txt"
    smi = folder / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$@" >> {args}\n{script_body}\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    monkeypatch.setitem(sys.modules, "pynvml", None)
    return args


def test_nvml_snapshot_reads_every_gpu_and_a_failing_field_is_none(nvml_calls, no_smi):
    snap = snapshot()
    assert snap["source"] == "nvml" and snap["reason"] is None and snap["utc_time"]
    first, second = snap["gpus"]
    assert list(first) == list(GPU_KEYS)
    assert first == {
        "index": 0,
        "name": "NVIDIA H200",  # bytes from older pynvml are decoded
        "uuid": "GPU-aaaa",
        "driver_version": "570.124.06",
        "cuda_driver_version": "12.8",
        "memory_total_mib": 143771,
        "memory_used_mib": 512,
        "persistence_mode": True,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 3201,
        "max_sm_clock_mhz": 1980,
        "power_limit_w": 700.0,
        "power_draw_w": 123.456,
        "temperature_c": 35,
        "throttle_mask": 0x5,
        "throttle_reasons": ["gpu_idle", "sw_power_cap"],
    }
    # The power draw raised NVMLError: that field is None, the rest was read.
    assert second["power_draw_w"] is None
    assert second["sm_clock_mhz"] == 345 and second["power_limit_w"] == 600.0
    assert second["persistence_mode"] is False and second["throttle_reasons"] == []
    assert nvml_calls == ["init", "shutdown"]
    json.dumps(snap)


def test_nvml_older_throttle_function_name_is_used_when_the_new_one_is_missing(
    nvml_calls, no_smi, monkeypatch
):
    module = sys.modules["pynvml"]
    module.nvmlDeviceGetCurrentClocksThrottleReasons = module.nvmlDeviceGetCurrentClocksEventReasons
    monkeypatch.delattr(module, "nvmlDeviceGetCurrentClocksEventReasons")
    assert snapshot()["gpus"][0]["throttle_reasons"] == ["gpu_idle", "sw_power_cap"]


def test_nvml_that_does_not_initialise_falls_back_and_names_its_error(monkeypatch, no_smi):
    calls = []
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(calls, "Driver Not Loaded"))
    snap = snapshot()
    assert snap["source"] is None and snap["gpus"] == []
    assert snap["reason"] == "NVML: nvmlInit failed: Driver Not Loaded; nvidia-smi: not on PATH"
    assert calls == ["init"]  # no shutdown without a successful init


def test_nvidia_smi_is_read_when_pynvml_is_missing(tmp_path, monkeypatch):
    args = fake_smi(tmp_path, monkeypatch, f"printf '{SMI_LINES}'")
    snap = snapshot()
    assert snap["source"] == "nvidia-smi" and snap["reason"] is None
    first, second = snap["gpus"]
    assert list(first) == list(GPU_KEYS)
    assert first["index"] == 0 and first["name"] == "NVIDIA H100 80GB HBM3"
    assert first["uuid"] == "GPU-cccc" and first["driver_version"] == "550.54.15"
    assert first["cuda_driver_version"] is None  # nvidia-smi's query does not give it
    assert (first["memory_total_mib"], first["memory_used_mib"]) == (81559, 1)
    assert first["persistence_mode"] is True and second["persistence_mode"] is False
    assert (first["sm_clock_mhz"], first["mem_clock_mhz"], first["max_sm_clock_mhz"]) == (
        1755,
        2619,
        1980,
    )
    assert (first["power_limit_w"], first["power_draw_w"], first["temperature_c"]) == (
        700.0,
        71.25,
        33,
    )
    assert first["throttle_mask"] == 5 and first["throttle_reasons"] == ["gpu_idle", "sw_power_cap"]
    assert second["power_draw_w"] is None and second["throttle_reasons"] == []
    called = args.read_text().splitlines()
    assert len(called) == 1  # one call
    assert "--format=csv,noheader,nounits" in called[0]
    assert "clocks_event_reasons.active" in called[0]


def test_nvidia_smi_that_rejects_the_new_field_name_is_asked_with_the_old_one(
    tmp_path, monkeypatch
):
    body = (
        'case "$*" in *clocks_event_reasons*) '
        'echo "Field \\"clocks_event_reasons.active\\" is not a valid field to query."; exit 2;; '
        f"esac\nprintf '{SMI_LINES}'"
    )
    args = fake_smi(tmp_path, monkeypatch, body)
    snap = snapshot()
    assert snap["source"] == "nvidia-smi" and len(snap["gpus"]) == 2
    assert snap["gpus"][0]["throttle_reasons"] == ["gpu_idle", "sw_power_cap"]
    called = args.read_text().splitlines()
    assert len(called) == 2 and "clocks_throttle_reasons.active" in called[1]


def test_nvidia_smi_failing_gives_its_exit_status_and_message(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, 'echo "No devices were found"; exit 6')
    snap = snapshot()
    assert snap["source"] is None and snap["gpus"] == []
    assert snap["reason"].startswith("NVML: pynvml not installed; nvidia-smi: ")
    assert "exit 6: No devices were found" in snap["reason"]


def test_neither_source_gives_no_gpu_and_a_reason_naming_both(monkeypatch, no_smi):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    snap = snapshot()
    assert snap["source"] is None and snap["gpus"] == []
    assert snap["reason"] == "NVML: pynvml not installed; nvidia-smi: not on PATH"


def test_reason_bits_come_from_pynvml_and_the_fallback_table_matches_it():
    pynvml = pytest.importorskip("pynvml")
    assert reason_bits(pynvml) == FALLBACK_REASON_BITS
    # A name the module defines wins over the table; the others fall back.
    bits = reason_bits(types.SimpleNamespace(nvmlClocksEventReasonGpuIdle=0x1000))
    assert bits["gpu_idle"] == 0x1000 and bits["sw_power_cap"] == 0x4


def test_decode_reasons_names_every_bit():
    assert decode_reasons(0) == []
    assert decode_reasons(0x1 | 0x40 | 0x80) == [
        "gpu_idle",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
    ]
    assert decode_reasons(0x4 | 0x800) == ["sw_power_cap", "unknown_0x800"]


def gpu(**fields):
    return {key: fields.get(key) for key in GPU_KEYS}


def snap(*gpus):
    return {"source": "nvml", "utc_time": "t", "gpus": list(gpus), "reason": None}


def test_row_columns_take_gpu_0_and_the_union_of_its_reasons(nvml_calls, no_smi):
    end = snapshot()
    start = snap(
        gpu(
            driver_version="570.124.06",
            sm_clock_mhz=345,
            throttle_reasons=["hw_slowdown", "gpu_idle"],
        )
    )
    assert row_columns(start, end) == {
        "gpu_driver_version": "570.124.06",
        "gpu_sm_clock_mhz": 1980,  # end's
        "gpu_throttle_reasons": "gpu_idle+hw_slowdown+sw_power_cap",
    }


def test_row_columns_none_and_missing():
    idle = snap(gpu(driver_version="550", sm_clock_mhz=1410, throttle_reasons=[]))
    assert row_columns(idle, idle)["gpu_throttle_reasons"] == "none"
    # end without a clock (or without a GPU): start's clock
    assert row_columns(idle, snap(gpu(driver_version="550")))["gpu_sm_clock_mhz"] == 1410
    assert row_columns(idle, None)["gpu_sm_clock_mhz"] == 1410
    nothing = {"gpu_driver_version": None, "gpu_sm_clock_mhz": None, "gpu_throttle_reasons": None}
    absent = {"source": None, "utc_time": "t", "gpus": [], "reason": "NVML: ..."}
    assert row_columns(None, absent) == nothing
    assert row_columns(None, None) == nothing
    # reasons that could not be read are not "none"
    assert row_columns(None, snap(gpu(throttle_reasons=None)))["gpu_throttle_reasons"] is None


@pytest.fixture
def torch_imported():
    frameworks.import_framework("torch", "cpu", 1)


def test_probe_record_without_a_gpu_source_says_why(torch_imported, monkeypatch, no_smi):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    rec = probe_record("torch", "cpu", threads=1)
    assert rec["probe_version"] == PROBE_VERSION == 4
    assert rec["gpu_state"]["start"] is None
    end = rec["gpu_state"]["end"]
    assert end["gpus"] == [] and end["source"] is None
    assert end["reason"] == "NVML: pynvml not installed; nvidia-smi: not on PATH"
    assert rec["gpu_driver_version"] is None


def test_probe_record_keeps_the_start_snapshot_and_reads_the_end(
    torch_imported, nvml_calls, no_smi
):
    start = snap(gpu(index=0, name="NVIDIA H200", driver_version="570.124.06"))
    rec = probe_record("torch", "cuda", threads=1, gpu_start=start)
    assert rec["gpu_state"]["start"] == start
    end = rec["gpu_state"]["end"]
    assert end["source"] == "nvml" and [g["uuid"] for g in end["gpus"]] == ["GPU-aaaa", "GPU-bbbb"]
    assert rec["gpu_driver_version"] == "570.124.06"
    assert nvml_calls == ["init", "shutdown"]
    json.dumps(rec)


def test_the_module_never_imports_pynvml_at_import_time():
    assert "pynvml" not in vars(gpu_state)
