"""The step thread: a TensorFlow point's blocks run on a fresh Python stack (issue 51:
TensorFlow captures the caller's stack with every eager op), and an interrupted step
neither hangs the job nor loses where it stopped."""

import signal
import threading
import time
import traceback

import pytest
from test_harness import FakeClock, FakeWorkload

from crossover_study.core.step_thread import StepAbandoned, StepThread
from crossover_study.measure.harness import measure
from crossover_study.measure.point import point_policy
from crossover_study.measure.watchdog import stopped_where
from crossover_study.study.points import TimingPolicy
from crossover_study.study.spec import PointSpec


def deep(depth, fn):
    """``fn()`` under ``depth`` more frames."""
    return fn() if depth == 0 else deep(depth - 1, fn)


def test_the_call_runs_on_a_shallow_stack_of_another_thread_and_returns_its_result():
    def probe():
        return threading.current_thread().name, len(traceback.extract_stack())

    with StepThread() as thread:
        name, depth = deep(40, lambda: thread.call(probe))
        caller_depth = deep(40, lambda: len(traceback.extract_stack()))
    assert name == "crossover-step"
    assert caller_depth > 40
    # the thread's bootstrap (3 frames), its serving loop and the callable
    assert depth <= 6


def test_an_exception_of_the_call_reaches_the_caller_with_its_frames():
    def failing_step():
        raise ValueError("bad batch")

    with StepThread() as thread:
        with pytest.raises(ValueError, match="bad batch") as info:
            thread.call(failing_step)
        assert thread.call(lambda: 7) == 7  # the thread still serves
    assert "failing_step" in [f.name for f in traceback.extract_tb(info.value.__traceback__)]


class Interrupted(BaseException):
    """What the point deadline's handler raises in the main thread (a BaseException)."""


@pytest.fixture
def interrupt_main_after():
    """Raise :class:`Interrupted` in the main thread ``seconds`` from now, through a
    signal handler, as the point deadline's stage 1 does."""

    def handler(signum, frame):
        raise Interrupted()

    old = signal.signal(signal.SIGUSR2, handler)
    timers = []

    def arm(seconds):
        main = threading.main_thread().ident
        timer = threading.Timer(seconds, signal.pthread_kill, args=(main, signal.SIGUSR2))
        timer.start()
        timers.append(timer)

    yield arm
    for timer in timers:
        timer.cancel()
    signal.signal(signal.SIGUSR2, old)


def test_an_interrupted_python_step_is_ended_in_its_thread_and_named(interrupt_main_after):
    ended = []

    def spinning_step():
        try:
            while True:
                sum(range(100))
        except StepAbandoned:
            ended.append(True)
            raise

    thread = StepThread()
    interrupt_main_after(0.2)
    with pytest.raises(Interrupted) as info:
        thread.call(spinning_step)
    assert ended == [True]
    deadline = time.perf_counter() + 5
    while thread.alive() and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert not thread.alive()  # ended once its step did
    assert "spinning_step" in stopped_where(info.value)
    with pytest.raises(RuntimeError, match="given up"):
        thread.call(lambda: 1)
    thread.close()


def test_a_step_waiting_where_python_cannot_raise_keeps_the_caller_waiting_until_it_returns(
    interrupt_main_after,
):
    # Nothing is measured beside a step still running; under a point deadline, stage 2
    # ends a process whose step never returns.
    thread = StepThread()
    interrupt_main_after(0.1)
    started = time.perf_counter()
    with pytest.raises(Interrupted) as info:
        thread.call(lambda: time.sleep(1.0))
    assert time.perf_counter() - started >= 0.95
    assert "<lambda>" in stopped_where(info.value)
    deadline = time.perf_counter() + 5
    while thread.alive() and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert not thread.alive()  # it took its pending exception and ended


class ThreadRecordingWorkload(FakeWorkload):
    """The harness's fake workload, recording the thread of every ``run``."""

    def run(self, n):
        self.events.append(("thread", threading.current_thread().name))
        super().run(n)


def test_a_fresh_stack_measurement_is_the_same_and_runs_its_blocks_in_the_step_thread():
    results = {}
    before = set(threading.enumerate())
    for fresh in (False, True):
        clock = FakeClock()
        w = ThreadRecordingWorkload(clock)
        m = measure(w, TimingPolicy(fresh_stack=fresh), clock=clock)
        threads = [e[1] for e in w.events if e[0] == "thread"]
        results[fresh] = (m.step_time_s, m.block_step_times_s, m.first_step_s, threads)
    assert results[True][:3] == results[False][:3]
    assert set(results[False][3]) == {"MainThread"}
    first, *rest = results[True][3]
    assert first == "MainThread"  # the first step, in the thread that built the program
    assert rest and set(rest) == {"crossover-step"}
    assert set(threading.enumerate()) <= before  # the step thread ended with the measurement


@pytest.mark.parametrize(("framework", "fresh"), [("tensorflow", True), ("torch", False)])
def test_tensorflow_points_are_timed_on_a_fresh_stack(framework, fresh):
    point = PointSpec("s001-mlp", framework, "cpu", "eager", {"batch": 64, "hidden": 128})
    policy = point_policy(TimingPolicy(), point)
    assert policy.fresh_stack is fresh
    assert policy.synced


@pytest.mark.parametrize(
    ("framework", "thread_name"), [("tensorflow", "crossover-rates"), ("torch", "MainThread")]
)
def test_tensorflow_rates_are_timed_from_the_same_shallow_stack(framework, thread_name):
    from crossover_study.stepmodel.timing import BLOCKS, rates_stack, timed_blocks

    seen = []

    def run(n):
        seen.append((threading.current_thread().name, len(traceback.extract_stack())))

    before = set(threading.enumerate())
    with rates_stack(framework):
        with rates_stack(framework):  # nested: the outer thread serves
            rate = deep(40, lambda: timed_blocks(run, lambda: None, 1.0, 3))
    assert rate["blocks"] == BLOCKS and rate["median"] >= 0
    assert len(seen) == BLOCKS + 1  # the untimed block, then the timed ones
    assert {name for name, _ in seen} == {thread_name}
    if framework == "tensorflow":
        assert max(depth for _, depth in seen) <= 6
    assert set(threading.enumerate()) <= before


def test_a_measurement_given_the_points_step_thread_runs_there_and_leaves_it_open():
    clock = FakeClock()
    w = ThreadRecordingWorkload(clock)
    with StepThread("the-points-thread") as thread:
        measure(w, TimingPolicy(fresh_stack=True), clock=clock, thread=thread)
        assert thread.alive()  # the point closes it, after its heap screen
        assert thread.call(lambda: threading.current_thread().name) == "the-points-thread"
    names = {e[1] for e in w.events if e[0] == "thread"}
    assert names == {"MainThread", "the-points-thread"}
    assert not thread.alive()
