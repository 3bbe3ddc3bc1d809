"""A whole training step's costs read from a Kineto trace (stepmodel.step_trace), the
source of the device cards' whole-step numbers: the ops it counts are the ops this study
counts on the CPU; the host's time per op leaves out blocked runtime calls and waits;
the short kernels' time in a queue; a trace without a step is refused."""

import json

import pytest

from crossover_study.stepmodel import step_trace


def _seed_step():
    """s001-mlp's step as its user wrote it (docs/seeds/001_*), on the CPU."""
    import torch

    x, t = torch.randn(64, 1024), torch.randn(64, 8)
    w1 = torch.randn(1024, 128, requires_grad=True)
    w2 = torch.randn(128, 8, requires_grad=True)
    w3 = torch.randn(8, 8, requires_grad=True)

    def step():
        y = x.mm(w1).clamp(min=0).mm(w2).clamp(min=0).mm(w3)
        loss = (y - t).pow(2).sum()
        loss.backward()
        with torch.no_grad():  # the seed's `w1 -= lr * w1.grad`: a mul and a sub_
            w1.sub_(1e-9 * w1.grad)
            w2.sub_(1e-9 * w2.grad)
            w1.grad.zero_()
            w2.grad.zero_()

    return step


def test_the_dispatched_ops_of_a_trace_are_the_ops_the_study_counts(tmp_path):
    """The trace-side definition gives the count a TorchDispatchMode gives the same step
    (38 for the seed's step: forward, backward and the update), so that a trace's cost
    per op prices this study's counted ops."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.utils._python_dispatch import TorchDispatchMode

    step = _seed_step()
    for _ in range(3):
        step()

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += 1
            return func(*args, **(kwargs or {}))

    counter = Count()
    with counter:
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    path = tmp_path / "step.json"
    prof.export_chrome_trace(str(path))
    events, _ = step_trace.read_events(path)
    threads = {}
    for e in events:
        threads.setdefault(e.get("tid"), []).append(e)
    counted = sum(len(step_trace.dispatched_ops(es)) for es in threads.values())
    assert counter.ops == 38
    assert counted == counter.ops
    assert torch.is_grad_enabled()


def test_every_composite_named_is_a_composite_of_the_installed_pytorch():
    import torch

    def implicit(name: str) -> bool:
        packet = getattr(torch.ops.aten, name.removeprefix("aten::"))
        return any(
            torch._C._dispatch_has_kernel_for_dispatch_key(  # noqa: SLF001 (no public API)
                name + ("" if o == "default" else f".{o}"), "CompositeImplicitAutograd"
            )
            for o in packet.overloads()
        )

    for name in sorted(step_trace.COMPOSITE_IMPLICIT):
        assert implicit(name), name
    # An op with a kernel of its own is counted, not passed through.
    assert not implicit("aten::addmm") and not implicit("aten::_to_copy")


def _op(tid, ts, dur, name="aten::mul"):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def _trace():
    """One ProfilerStep: thread 1 dispatches 25 ops 10 µs apart (an aten::linear holding a
    t and an addmm counts as those two), one interval holding a 400 µs blocked launch and
    one a 5 ms wait; thread 2 (the autograd engine) 21 ops 4 µs apart inside backward
    nodes. On the device, kernels queued back to back: 2 µs each with 1 µs gaps."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 1,
               "tid": 1, "ts": 0, "dur": 20000}]  # fmt: skip
    ts = 10.0
    for i in range(24):
        events.append(_op(1, ts, 3))
        ts += 10 + (400 if i == 5 else 0) + (5000 if i == 12 else 0)
    events.append(_op(1, ts, 15, "aten::linear"))
    events += [_op(1, ts, 1, "aten::t"), _op(1, ts + 10, 3, "aten::addmm")]
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                   "tid": 1, "ts": 10 + 5 * 10 + 4, "dur": 400, "args": {"correlation": 1}})  # fmt: skip
    node = {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: X",
            "pid": 1, "tid": 2, "ts": 9000, "dur": 100}  # fmt: skip
    events.append(node)
    events += [_op(2, 9000 + 4 * i, 2) for i in range(21)]
    for i in range(30):
        start = 12000 + 3 * i
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                       "tid": 1, "ts": 11000 + i, "dur": 1, "args": {"correlation": 100 + i}})  # fmt: skip
        events.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": start,
                       "dur": 2, "args": {"correlation": 100 + i}})  # fmt: skip
    return {"traceEvents": events, "deviceProperties": [{"name": "Test GPU"}]}


def test_the_host_time_per_op_leaves_out_blocked_calls_and_waits(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_trace()))
    costs = step_trace.trace_costs(path)
    assert costs.devices == ("Test GPU",) and costs.steps == 1
    assert costs.ops_per_step == 26 + 21
    by_tid = {t.tid: t for t in costs.threads}
    # Thread 1: 25 intervals of 10 µs (the blocked 400 µs taken out of its interval; the
    # 5 ms wait left out of the mean).
    assert by_tid[1].ops == 26
    assert by_tid[1].host_per_op_s == pytest.approx(10e-6)
    assert by_tid[1].blocked_s == pytest.approx(400e-6)
    assert by_tid[1].kept == pytest.approx(24 / 25)
    assert by_tid[2].host_per_op_s == pytest.approx(4e-6)
    # Kernels back to back: 2 µs each, then a 1 µs gap.
    assert costs.queued_kernel_s == pytest.approx(3e-6)
    assert costs.short_kernel_s == pytest.approx(2e-6)


def test_a_trace_without_a_step_is_refused(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [_op(1, 0, 1)]}))
    with pytest.raises(ValueError, match="no ProfilerStep"):
        step_trace.trace_costs(path)
    with pytest.raises(ValueError, match="no traceEvents"):
        step_trace.read_events({"events": []})
