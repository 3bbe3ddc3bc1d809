"""Synthetic Kineto Chrome traces of small CUDA steps, in the format
``torch.profiler``'s ``export_chrome_trace`` writes (checked against Holistic Trace
Analysis's published test traces): ``ph: "X"`` events of categories ``python_function``,
``cpu_op``, ``cuda_runtime`` (``cudaLaunchKernel``, ``cudaMemcpyAsync``,
``cuda*Synchronize``, with their ``cbid``), ``kernel`` and ``gpu_memcpy`` on the
device's process and stream, ``args.correlation`` joining each runtime call to what it
launched, ``ac2g`` flow events, metadata events and the profiler's span, timestamps in µs
from a base, with 3 decimals.

:func:`regime_traces` builds the three written to ``tests/data/kineto/`` (one per device
regime); ``tests/test_device_trace.py`` checks that the files are what it builds, so the
files are documented by this code and cannot drift from it.
"""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "kineto"
#: The host process and thread, the device's process (its index) and stream.
PID, STREAM = 4242, 7
#: A base in µs as recent Kineto traces have (time since the start of the trimester
#: Kineto counts from, ``baseTimeNanoseconds``); 16-digit epoch µs are tested apart.
BASE_US = 3141592653.0
#: The CUPTI callback ids Kineto writes for each runtime call.
CBID = {
    "cudaLaunchKernel": 211,
    "cudaMemcpyAsync": 41,
    "cudaStreamSynchronize": 131,
    "cudaDeviceSynchronize": 165,
}
BLOCK = "crossover_study/measure/attribution.py(280): _profiled_block"


class TraceBuilder:
    """A host thread issuing CUDA work in order, and the device running it in order on
    one stream: a kernel starts when its launch call has returned and the kernel before
    it has ended. Times are µs from the trace's start."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.now = 0.0
        self.device_free = 0.0
        self.correlation = 100
        self.external = 1

    def _x(self, cat: str, name: str, ts: float, dur: float, pid, tid, args: dict) -> None:
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": round(BASE_US + ts, 3),
                "dur": round(dur, 3),
                "args": args,
            }
        )

    def _flow(self, correlation: int, host_ts: float, device_ts: float) -> None:
        self.events.append(
            {
                "ph": "s",
                "id": correlation,
                "pid": PID,
                "tid": PID,
                "ts": round(BASE_US + host_ts, 3),
                "cat": "ac2g",
                "name": "ac2g",
            }
        )
        self.events.append(
            {
                "ph": "f",
                "id": correlation,
                "pid": 0,
                "tid": STREAM,
                "ts": round(BASE_US + device_ts, 3),
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )

    def _runtime(self, name: str, ts: float, dur: float) -> int:
        self.correlation += 1
        args = {"External id": self.external, "cbid": CBID[name], "correlation": self.correlation}
        self._x("cuda_runtime", name, ts, dur, PID, PID, args)
        return self.correlation

    def _device(self, cat: str, name: str, ready: float, dur: float, extra: dict) -> float:
        start = max(ready, self.device_free)
        args = {"External id": self.external, "device": 0, "context": 1, "stream": STREAM}
        args.update(correlation=self.correlation, **extra)
        self._x(cat, name, start, dur, 0, STREAM, args)
        self.device_free = start + dur
        return start

    def op(self, name: str, kernel_us: float, launch_us: float = 6.0, op_us: float = 15.0):
        """An ATen op of ``op_us`` on the host that launches one kernel of ``kernel_us``
        through a ``cudaLaunchKernel`` call of ``launch_us``."""
        self.external += 1
        self._x("cpu_op", name, self.now, op_us, PID, PID, {"External id": self.external})
        call = self.now + 2.0
        correlation = self._runtime("cudaLaunchKernel", call, launch_us)
        kernel = f"void at::native::{name.split('::')[-1]}_kernel<float>(int, float*)"
        extra = {"queued": 0, "registers per thread": 32, "grid": [64, 1, 1], "block": [256, 1, 1]}
        start = self._device("kernel", kernel, call + launch_us + 1.0, kernel_us, extra)
        self._flow(correlation, call, start)
        self.now += op_us

    def copy(self, direction: str, nbytes: int, device_us: float, call_us: float = 10.0):
        """``cudaMemcpyAsync`` of ``nbytes`` (``HtoD`` or ``DtoH``, pageable host memory,
        so the call returns once the copy is done) taking ``device_us`` on the device."""
        self.external += 1
        name = "aten::copy_" if direction == "HtoD" else "aten::_local_scalar_dense"
        start_op = self.now
        call = self.now + 2.0
        self.correlation += 1
        correlation = self.correlation
        memcpy = (
            "Memcpy HtoD (Pageable -> Device)"
            if direction == "HtoD"
            else "Memcpy DtoH (Device -> Pageable)"
        )
        extra = {"bytes": nbytes, "memory bandwidth (GB/s)": round(nbytes / device_us / 1e3, 6)}
        start = self._device("gpu_memcpy", memcpy, call + 1.0, device_us, extra)
        call_dur = max(call_us, start + device_us + 1.0 - call)
        args = {"External id": self.external, "cbid": CBID["cudaMemcpyAsync"]}
        args["correlation"] = correlation
        self._x("cuda_runtime", "cudaMemcpyAsync", call, call_dur, PID, PID, args)
        self._flow(correlation, call, start)
        self.now = call + call_dur + 2.0
        self._x(
            "cpu_op", name, start_op, self.now - start_op, PID, PID, {"External id": self.external}
        )

    def sync(self, name: str = "cudaStreamSynchronize") -> None:
        """A synchronising call: it returns 1 µs after the device's last work ends."""
        self.external += 1
        dur = max(2.0, self.device_free + 1.0 - self.now)
        self._runtime(name, self.now, dur)
        self.now += dur

    def python(self, us: float, name: str = "torch/utils/data/dataloader.py(733): __next__"):
        """``us`` of the host's Python with no CUDA call (a data loader's next batch)."""
        self._x("python_function", name, self.now, us, PID, PID, {"Python id": self.external})
        self.now += us

    def block(self, steps: int, step) -> None:
        """The profiled block: ``steps`` calls of ``step(self)`` and the closing
        ``cudaDeviceSynchronize``, inside the block's frame."""
        start = self.now
        self.now += 3.0
        for _ in range(steps):
            step(self)
        self.sync("cudaDeviceSynchronize")
        self.now += 2.0
        self._x("python_function", BLOCK, start, self.now - start, PID, PID, {"Python id": 1})

    def trace(self, name: str) -> dict:
        """The Chrome trace: metadata events, the events in time order, the span."""
        meta = [
            {"name": name, "ph": "M", "ts": BASE_US, "pid": pid, "tid": tid, "args": args}
            for name, pid, tid, args in (
                ("process_name", PID, 0, {"name": "python3.12"}),
                ("process_name", 0, 0, {"name": "python3.12"}),
                ("process_labels", 0, 0, {"labels": "GPU 0"}),
                ("thread_name", 0, STREAM, {"name": f"stream {STREAM} "}),
            )
        ]
        events = sorted(self.events, key=lambda e: (e["ts"], e["ph"] != "X"))
        span = {
            "ph": "X",
            "cat": "Trace",
            "ts": BASE_US,
            "dur": round(max(self.now, self.device_free), 3),
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "name": "PyTorch Profiler (0)",
            "args": {"Op count": 0},
        }
        return {
            "schemaVersion": 1,
            "deviceProperties": [
                {"id": 0, "name": "synthetic GPU", "computeMajor": 9, "computeMinor": 0}
            ],
            "traceEvents": [*meta, *events, span],
            "traceName": name,
        }


def launch_bound() -> dict:
    """An eager step of small layers: 24 ops per step, each launching a 3-5 µs kernel
    through a 6 µs launch call, then the loss read back (a 4-byte DtoH copy and a stream
    sync); 2 steps."""

    def step(b: TraceBuilder) -> None:
        for i in range(24):
            b.op(("aten::addmm", "aten::relu", "aten::mul")[i % 3], kernel_us=3.0 + (i % 3))
        b.copy("DtoH", 4, device_us=2.0)
        b.sync()

    builder = TraceBuilder()
    builder.block(2, step)
    return builder.trace("launch_bound.json")


def compute_bound() -> dict:
    """A step of 6 large products of 150 µs each, launched back to back, and the loss
    read back; 2 steps."""

    def step(b: TraceBuilder) -> None:
        for _ in range(6):
            b.op("aten::mm", kernel_us=150.0)
        b.copy("DtoH", 4, device_us=2.0)
        b.sync()

    builder = TraceBuilder()
    builder.block(2, step)
    return builder.trace("compute_bound.json")


def transfer_bound() -> dict:
    """The copy-each-step anti-pattern: a 12.6 MB batch copied from pageable host memory
    (600 µs on the device), 4 kernels of 10 µs, the loss read back; 2 steps."""

    def step(b: TraceBuilder) -> None:
        b.copy("HtoD", 12_582_912, device_us=600.0)
        for _ in range(4):
            b.op("aten::addmm", kernel_us=10.0)
        b.copy("DtoH", 4, device_us=2.0)
        b.sync()

    builder = TraceBuilder()
    builder.block(2, step)
    return builder.trace("transfer_bound.json")


def host_bound() -> dict:
    """A step that waits for a data loader's Python (900 µs) and then runs 2 kernels of
    60 µs; 2 steps (built in the test, not written to a file)."""

    def step(b: TraceBuilder) -> None:
        b.python(900.0)
        for _ in range(2):
            b.op("aten::addmm", kernel_us=60.0)
        b.sync()

    builder = TraceBuilder()
    builder.block(2, step)
    return builder.trace("host_bound.json")


def sub_microsecond() -> dict:
    """A fast GPU's eager step: 24 ops per step, each launching a kernel of 1.3, 1.55 or
    1.8 µs through a 2.6 µs launch call, then a stream sync; 2 steps (built in the test,
    not written to a file). Its times need the trace's ns: whole µs would lose them."""

    def step(b: TraceBuilder) -> None:
        for i in range(24):
            b.op("aten::mul", kernel_us=1.3 + 0.25 * (i % 3), launch_us=2.6)
        b.sync()

    builder = TraceBuilder()
    builder.block(2, step)
    return builder.trace("sub_microsecond.json")


def regime_traces() -> dict[str, dict]:
    """The traces written to :data:`DATA`, by file name."""
    return {
        "launch_bound.json": launch_bound(),
        "compute_bound.json": compute_bound(),
        "transfer_bound.json": transfer_bound(),
    }


def write_regime_traces() -> None:
    """Write :func:`regime_traces` into :data:`DATA` (run by hand after changing them)."""
    DATA.mkdir(parents=True, exist_ok=True)
    for name, trace in regime_traces().items():
        (DATA / name).write_text(dumps(trace))


def dumps(trace: dict) -> str:
    """``trace`` as JSON laid out as Kineto lays it out: one event per line."""
    head = {k: v for k, v in trace.items() if k != "traceEvents"}
    lines = [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items() if k != "traceName"]
    events = ",\n".join("    " + json.dumps(e) for e in trace["traceEvents"])
    name = json.dumps(trace["traceName"])
    return (
        "{\n"
        + "\n".join(lines)
        + f'\n  "traceEvents": [\n{events}\n  ],\n  "traceName": {name}\n}}\n'
    )
