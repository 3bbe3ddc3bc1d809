"""The accelerator's why from its trace (issue 53, Part A), tested without a GPU on
recorded Kineto Chrome traces of small CUDA steps (tests/data/kineto/, written by
tests/kineto_traces.py): one per regime, read by the same code that reads a live
profile; the answer's wording of each."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import statistics

import pandas as pd
import pytest
from kineto_traces import DATA, TraceBuilder, dumps, host_bound, regime_traces, sub_microsecond

from crossover_study.answers.regime import device_regime_text, regime_clause
from crossover_study.measure import attribution, event_tree
from crossover_study.measure.device_trace import (
    TraceEvent,
    block_window,
    device_columns,
    device_regime,
    device_step,
    from_chrome_trace,
    from_kineto,
)
from crossover_study.measure.tracer_cost import CATEGORIES
from crossover_study.study import cases

STEPS = 2  # each recorded block holds 2 steps


def _read(name: str) -> list[TraceEvent]:
    return from_chrome_trace(DATA / name)


def test_the_recorded_traces_are_what_their_builder_writes():
    for name, trace in regime_traces().items():
        text = (DATA / name).read_text()
        assert json.loads(text) == trace, name
        assert text == dumps(trace), name  # Kineto's layout: one event per line


class FakeKinetoEvent:
    """A live ``_KinetoEvent`` (what ``prof.profiler.kineto_results.events()`` gives),
    built from one event of a Chrome trace: Kineto writes the trace's ``args`` from the
    event's ``metadata_json()`` (torch/profiler/_chrome_trace_export.py)."""

    def __init__(self, event: dict):
        self.event = event

    def activity_type(self) -> str:
        return self.event["cat"]

    def name(self) -> str:
        return self.event["name"]

    def start_ns(self) -> int:
        return round(self.event["ts"] * 1000)

    def duration_ns(self) -> int:
        return round(self.event["dur"] * 1000)

    def correlation_id(self) -> int:
        return self.event["args"].get("correlation", 0)

    def metadata_json(self) -> str:
        args = {k: v for k, v in self.event["args"].items() if k != "External id"}
        return json.dumps(args)[1:-1]


@pytest.mark.parametrize("name", sorted(regime_traces()))
def test_a_recorded_trace_and_a_live_profile_are_read_by_the_same_code(name):
    trace = regime_traces()[name]
    live = [FakeKinetoEvent(e) for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert device_step(from_kineto(live), STEPS) == device_step(_read(name), STEPS)
    # both keep the device's events, the CUDA calls and the block's frame, nothing else
    kinds = {e.cat for e in from_kineto(live)}
    assert kinds <= {"kernel", "gpu_memcpy", "cuda_runtime", "python_function"}
    assert [e.name for e in from_kineto(live) if e.cat == "python_function"] == [
        "crossover_study/measure/attribution.py(280): _profiled_block"
    ]


class OlderKinetoEvent(FakeKinetoEvent):
    """A live event of a PyTorch whose ``_KinetoEvent`` has no ``activity_type``: the
    category comes from the device type and the name."""

    def __getattribute__(self, name):
        if name in ("activity_type", "metadata_json"):
            raise AttributeError(name)
        return super().__getattribute__(name)

    def device_type(self) -> str:
        device = self.event["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")
        return "DeviceType.CUDA" if device else "DeviceType.CPU"

    def is_python_function(self) -> bool:
        return self.event["cat"] == "python_function"


def test_a_live_event_without_activity_type_is_read_from_its_device_and_name():
    trace = regime_traces()["transfer_bound.json"]
    older = [OlderKinetoEvent(e) for e in trace["traceEvents"] if e.get("ph") == "X"]
    step = device_step(from_kineto(older), STEPS)
    # the same step, but for the copies' bytes, which only the metadata gives
    recorded = device_step(_read("transfer_bound.json"), STEPS)
    assert step == dataclasses.replace(recorded, h2d_bytes=None, d2h_bytes=None)


def test_a_gzipped_trace_with_epoch_timestamps_keeps_nanoseconds(tmp_path):
    # Kineto's older traces count µs from the epoch (16 digits): a float holds them
    # only to 0.25 µs once multiplied to ns, so times are taken relative to the first.
    base = 1707417525512110.0
    trace = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "python_function",
                "name": "x/measure/attribution.py(1): _profiled_block",
                "ts": base,
                "dur": 20.0,
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel_v7000",
                "ts": base + 1.0,
                "dur": 5.0,
                "args": {"correlation": 9},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "ts": base + 7.0,
                "dur": 1.125,
                "args": {"correlation": 9},
            },
        ]
    }
    path = tmp_path / "old.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump(trace, handle)
    events = from_chrome_trace(path)
    assert block_window(events) == (0, 20_000)
    step = device_step(events, 1)
    assert step.busy_s == 1.125e-6 and step.kernel_median_s == 1.125e-6
    assert step.launch_s == 5e-6 and step.short_kernel_share == 1.0  # a version-suffixed call


def test_idle_between_short_kernels_is_launch_bound():
    step = device_step(_read("launch_bound.json"), STEPS)
    # 24 kernels of 3, 4 and 5 µs per step, each behind a 6 µs cudaLaunchKernel, and a
    # 4-byte copy of the loss: the device works 98 µs of a 380 µs step
    assert step.kernels == 24 and step.kernel_median_s == pytest.approx(4e-6)
    assert step.busy_s == pytest.approx(98e-6) and step.short_kernel_share == 1.0
    assert step.busy_s + step.idle_s == pytest.approx(step.block_s / STEPS)
    assert step.largest_gap_s == pytest.approx(20e-6)  # the loss read back, the next launch
    assert step.launch_s == pytest.approx(24 * 6e-6)
    assert (step.d2h_copies, step.d2h_bytes, step.h2d_copies) == (1, 4, 0)
    # one stream sync per step and the block's closing device sync
    assert step.syncs == 1.5
    # timed without the tracer the step is faster, never its kernels
    assert device_regime(step, 0.9 * step.block_s / STEPS) == "launch-bound"


def test_busy_with_long_kernels_is_device_bound():
    step = device_step(_read("compute_bound.json"), STEPS)
    assert step.kernels == 6 and step.kernel_median_s == pytest.approx(150e-6)
    assert step.short_kernel_share == 0.0
    assert step.busy_s / (step.block_s / STEPS) > 0.95
    assert device_regime(step, step.block_s / STEPS) == "device-bound"


def test_copies_dominating_are_transfer_bound():
    step = device_step(_read("transfer_bound.json"), STEPS)
    assert (step.h2d_copies, step.h2d_bytes) == (1, 12_582_912)
    assert step.copy_s == pytest.approx(602e-6) and step.kernel_s == pytest.approx(40e-6)
    # the device is busy most of the step, but with copies: transfer-bound, not device-bound
    assert step.busy_s > 0.5 * step.block_s / STEPS
    assert device_regime(step, step.block_s / STEPS) == "transfer-bound"


def test_idle_while_the_host_does_other_work_is_host_bound():
    step = device_step(from_chrome_trace(host_bound()), STEPS)
    # 2 kernels of 60 µs behind 900 µs of a data loader's Python: long kernels, few launches
    assert step.short_kernel_share == 0.0 and step.launch_s < 0.15 * step.block_s / STEPS
    # the longest gap: from the block's start over the loader's 900 µs to the first kernel
    assert step.largest_gap_s == pytest.approx(912e-6)
    assert device_regime(step, step.block_s / STEPS) == "host-bound"


def test_xprofs_launch_share_alone_makes_a_step_launch_bound():
    step = device_step(from_chrome_trace(host_bound()), STEPS)
    # the same step with launches of 15 % of it: launch-bound though no kernel is short
    slower = dataclasses.replace(step, launch_s=0.15 * step.block_s / STEPS)
    assert device_regime(slower, step.block_s / STEPS) == "launch-bound"


def test_a_trace_without_the_blocks_frame_is_refused():
    events = [e for e in _read("launch_bound.json") if e.cat != "python_function"]
    with pytest.raises(LookupError):
        device_step(events, STEPS)
    with pytest.raises(ValueError):
        device_step(_read("launch_bound.json"), 0)


# -- why not HTA: the definitions the module's docstring names ---------------------------


def test_times_keep_the_traces_nanoseconds_that_whole_microseconds_lose():
    trace = sub_microsecond()
    step = device_step(from_chrome_trace(trace), STEPS)
    assert step.kernels == 24 and step.kernel_median_s == pytest.approx(1.55e-6)
    assert step.busy_s == pytest.approx(37.2e-6) and step.launch_s == pytest.approx(62.4e-6)

    # HTA's default rounding (start up, end down to whole µs) gives the docstring's
    # 1.0 µs median, 16.0 µs busy and 48 µs of launches per step, some kernels 0 µs
    def whole_us(name):
        return [
            math.floor(e["ts"] + e["dur"]) - math.ceil(e["ts"])
            for e in trace["traceEvents"]
            if e.get("ph") == "X" and name in (e["cat"], e["name"])
        ]

    kernels = whole_us("kernel")
    assert statistics.median(kernels) == 1 and min(kernels) == 0
    assert sum(kernels) / STEPS == 16 and sum(whole_us("cudaLaunchKernel")) / STEPS == 48


def test_idle_is_the_blocks_time_outside_kernels_copies_and_memsets():
    events = _read("launch_bound.json")
    step = device_step(events, STEPS)
    w0, w1 = block_window(events)
    device = [e for e in events if e.cat in ("kernel", "gpu_memcpy", "gpu_memset")]
    first, last = min(e.start_ns for e in device), max(e.end_ns for e in device)
    # idle over the block (563 µs in 2 steps), not over the first to the last device
    # event as HTA's temporal breakdown has it (536 µs): the block's edges count
    assert step.idle_s * STEPS == pytest.approx(563e-6)
    assert (last - first) / 1e9 - step.busy_s * STEPS == pytest.approx(536e-6)
    edges = (first - w0 + w1 - last) / 1e9
    assert step.idle_s * STEPS == pytest.approx(536e-6 + edges)
    # Kineto's cuda_sync events and a cpu_op naming its stream are no device work, where
    # HTA's temporal breakdown counts any event with a stream: 5 µs of each, in the
    # 12 µs gap after the first kernel, would be busy time as kernels
    trace = regime_traces()["launch_bound.json"]
    kernel = next(e for e in trace["traceEvents"] if e.get("cat") == "kernel")
    gap = {**kernel, "ts": round(kernel["ts"] + kernel["dur"] + 2, 3), "dur": 5.0}
    for cat, name in (("cuda_sync", "Stream Sync"), ("cpu_op", "triton_poi_fused_0")):
        with_stream = {
            **trace,
            "traceEvents": [*trace["traceEvents"], gap | {"cat": cat, "name": name}],
        }
        assert device_step(from_chrome_trace(with_stream), STEPS) == step, name
    as_kernel = {**trace, "traceEvents": [*trace["traceEvents"], gap]}
    assert device_step(from_chrome_trace(as_kernel), STEPS).busy_s == pytest.approx(
        step.busy_s + 2.5e-6
    )


def test_short_kernels_are_kernels_shorter_than_their_kernel_launch_call():
    trace = regime_traces()["transfer_bound.json"]
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    calls = {e["args"]["correlation"]: e for e in events if e["name"] == "cudaMemcpyAsync"}
    copies = [e for e in events if e["cat"] == "gpu_memcpy"]
    # every copy ran shorter than its cudaMemcpyAsync (HTA's default join counts it as
    # a short kernel), but copies are no kernels here: none of the kernels is short
    assert copies and all(c["dur"] < calls[c["args"]["correlation"]]["dur"] for c in copies)
    assert device_step(from_chrome_trace(trace), STEPS).short_kernel_share == 0.0
    # the driver API's launch (Triton's cuLaunchKernel) joins its kernel as the runtime's
    launch_bound = regime_traces()["launch_bound.json"]
    driver = [
        {**e, "cat": "cuda_driver", "name": "cuLaunchKernel"}
        if e.get("name") == "cudaLaunchKernel"
        else e
        for e in launch_bound["traceEvents"]
    ]
    assert device_step(
        from_chrome_trace({**launch_bound, "traceEvents": driver}), STEPS
    ) == device_step(_read("launch_bound.json"), STEPS)
    # a launch call over HTA's 50 µs plotting cutoff is kept: its kernel is short
    builder = TraceBuilder()
    builder.block(1, lambda b: b.op("aten::addmm", kernel_us=20.0, launch_us=60.0))
    slow = device_step(from_chrome_trace(builder.trace("slow_launch.json")), 1)
    assert slow.short_kernel_share == 1.0 and slow.launch_s == pytest.approx(60e-6)


# -- the attribution: CUDA activity on a CUDA point only -----------------------------------


def test_a_cuda_point_gets_the_device_columns_and_a_cpu_point_none(monkeypatch):
    trace = _read("launch_bound.json")

    def profile(workload, steps, device, fit_entries=None):
        seconds = dict.fromkeys(CATEGORIES, 0.0) | {"ops": 0.0006, "python": 0.0001}
        events = {c: {} for c in CATEGORIES} | {"ops": {"TorchOp": 10}, "python": {"PyCall": 5}}
        block = event_tree.Event("PyCall", "block", 0, 759_000)
        return block, seconds, events, trace if device == "cuda" else None

    monkeypatch.setattr(attribution, "_profile", profile)
    monkeypatch.setattr(attribution, "_WARM", True)
    monkeypatch.setattr(attribution, "tracer_bias", lambda: {"TorchOp": 1e-7, "PyCall": 1e-7})

    class TwoStepCalls:  # one call of 2 steps: the block the trace holds
        steps_per_call = 2

    cuda = attribution.attribute_point(TwoStepCalls(), "cuda", 0.00035, 0.001)
    assert cuda["attr_steps"] == 2 and cuda["attr_kernels"] == 24
    assert cuda["attr_device_regime"] == "launch-bound"
    assert cuda["attr_device_busy_s"] == pytest.approx(98e-6)
    cpu = attribution.attribute_point(TwoStepCalls(), "cpu", 0.00035, 0.001)
    assert not [c for c in cpu if "device" in c or "kernel" in c or "copies" in c]
    # the host's columns do not depend on the device's
    assert {k: v for k, v in cuda.items() if k in cpu and k != "attr_cost_s"} == {
        k: v for k, v in cpu.items() if k != "attr_cost_s"
    }


def test_a_profiler_without_cuda_activity_gives_the_host_attribution_and_no_trace():
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, supported_activities

    if ProfilerActivity.CUDA in supported_activities():
        pytest.skip("this PyTorch's profiler records CUDA activity")

    class Sums:
        def run(self, steps):
            for _ in range(steps):
                torch.ones(64).sum()

        def sync(self):
            pass

    _, seconds, _, trace = attribution._profile(Sums(), 2, "cuda")
    assert trace is None and seconds["ops"] > 0


def test_a_cuda_point_without_device_activity_says_why():
    assert "no device activity" in attribution._device_part(None, 2, 0.001)["attr_device_source"]
    no_block = [e for e in _read("launch_bound.json") if e.cat != "python_function"]
    assert attribution._device_part(no_block, 2, 0.001)["attr_device_source"].startswith(
        "not read: "
    )


def test_the_hosts_tree_leaves_the_traces_cuda_events_to_the_device():
    event = event_tree.Event
    # with CUDA activity the tree holds the launch call and its kernel (tag Kineto)
    # under the op; the launch stays the op's time, the kernel is not host time
    kernel = event("_EventType.Kineto", "void gemm_kernel", 500, 400)
    launch = event("_EventType.Kineto", "cudaLaunchKernel", 150, 60, [kernel])
    op = event("_EventType.TorchOp", "aten::addmm", 100, 200, [launch])
    binding = event("_EventType.PyCCall", "<built-in method addmm>", 90, 220, [op])
    block = event(
        "_EventType.PyCall", "x/measure/attribution.py(1): _profiled_block", 0, 1000, [binding]
    )
    seconds, events = event_tree.attribute_tree(event_tree.nested(block), "cuda")
    assert seconds["ops"] == pytest.approx(220e-9)
    assert seconds["unattributed"] == pytest.approx(780e-9)  # the block's own time
    assert sum(seconds.values()) == pytest.approx(1000e-9)
    assert "Kineto" not in str(events)


# -- the answer's why on the GPU -----------------------------------------------------------


def _row(name: str, step_time_s: float | None = None, **extra) -> pd.Series:
    events = _read(name) if name.endswith(".json") else from_chrome_trace(host_bound())
    block = device_step(events, STEPS).block_s / STEPS
    step = step_time_s or block
    row = {
        "device": "cuda",
        "framework": "torch",
        "variant": "eager",
        "step_time_s": step,
        **device_columns(events, STEPS, step),
        **extra,
    }
    return pd.Series(row)


def test_the_why_of_a_launch_bound_step():
    text = device_regime_text(_row("launch_bound.json", 350e-6))
    assert text.startswith(
        "on CUDA the step is launch-bound (from its trace): the GPU was busy 28 % of the step: "
        "24 kernels of median 4 µs, each waiting for the host to launch it (100 % of them "
        "shorter than their launch call; the launches took 41 % of the step)"
    )
    assert "; 1.5 synchronisations per step waited 3 µs" in text
    assert "CUDA graph" in text and "torch.compile" in text  # what removes it


def test_the_why_of_a_device_bound_step():
    text = device_regime_text(_row("compute_bound.json"))
    assert text.startswith(
        "on CUDA the step is compute- or memory-bound (from its trace; kernel times cannot "
        "tell which): the GPU was busy 98 % of the step: 6 kernels of median 150 µs"
    )


def test_the_why_of_a_transfer_bound_step():
    text = device_regime_text(_row("transfer_bound.json"))
    assert text.startswith(
        "on CUDA the step is transfer-bound (from its trace): copies between the host and the "
        "GPU took 88 % of the step: 1 host-to-device copy (12.6 MB) and 1 device-to-host copy "
        "(4 B) per step"
    )
    assert "pinned memory" in text


def test_the_why_of_a_host_bound_step_names_the_hosts_cost_beside_it():
    shares = {"data": 0.8, "ops": 0.15, "python": 0.05}
    step = 0.001
    host = {f"attr_{c}_s": shares.get(c, 0.0) * step for c in CATEGORIES}
    row = _row(
        "host_bound",
        step,
        attr_dominant="data",
        model_share=0.2,
        model_regime="launch-bound",
        **host,
    )
    text = device_regime_text(row)
    assert text.startswith(
        "on CUDA the step is host-bound (from its trace): the GPU was idle 88 % of the step, "
        "waiting for the host (2 kernels of median 60 µs)"
    )
    assert "randperm" in text  # the host's largest share's fix
    assert "; on the host the profile puts 80 % in data loading" in text
    assert text.endswith(
        "the step-time model calls it launch-bound and explains 20 % of the measured step"
    )


def test_the_clause_gives_the_gpus_why_beside_the_cpus():
    seed = cases.get("s001-mlp").seed
    common = dict(
        case="s001-mlp", variant="eager", status="ok", timing="synced", replicas=1, **seed
    )
    gpu = _row("launch_bound.json", 350e-6).to_dict() | common
    cpu = {"device": "cpu", "framework": "torch", "step_time_s": 0.001} | common
    cpu |= {f"attr_{c}_s": 0.0005 if c in ("ops", "python") else 0.0 for c in CATEGORIES}
    cpu |= {"attr_dominant": "ops"}
    clause = regime_clause(pd.DataFrame([cpu, gpu]), "s001-mlp")
    # no model columns at all: the CPU has no regime to give, the GPU its trace's
    assert clause.startswith(
        "why (measured, with the step-time model): with torch, on CUDA the step is launch-bound"
    )
