"""Run a block of steps on a fresh Python stack, as a user's script runs its loop.

TensorFlow records the caller's Python stack with every eager op it executes:
``TFE_Py_FastPathExecute`` and ``TFE_Py_ExecuteCancelable`` capture up to 30 frames
(``StackTrace::Capture(kStackTraceInitialSize)``, ``tensorflow/python/util/
stack_trace.{h,cc}``), and on Python 3.11 and later each frame's line number is
computed there (``PyFrame_GetLineNumber``), which walks the frame's code object's
location table from its start to the current instruction. An op therefore costs more
the more frames sit above the step and the further into their functions those frames
are. A user's script calls its step from a short loop near the top of its stack; the
measuring job calls it some fifteen frames down, from long functions (the runner, the
point, the harness). On the 2-core VM, s001-mlp's TensorFlow step (31 ops, 2.2 ms) ran
9-14 % slower there than from a fresh thread (``benchmarks/tf_stack_depth.py``,
docs/VALIDATION.md, 2026-12-06).

A :class:`StepThread` runs the blocks of one point in a thread of its own, whose stack
holds only the thread's bootstrap frames and its short serving loop, and waits for each.
The frameworks whose blocks run so are :data:`FRESH_STACK_FRAMEWORKS`.

One thread for all the blocks of a point, not one per block: a new thread's first
TensorFlow step took about 3.5 ms more than the next (2.3 ms) on the 2-core VM
(2026-12-06), a cost a block of 30 steps would carry every time. Not
``concurrent.futures``: an interrupted step must be ended inside its thread
(:meth:`StepThread.call`), which a pool's future cannot do.
"""

from __future__ import annotations

import ctypes
import queue
import sys
import threading
import traceback
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Frameworks whose timed steps run on a fresh stack: TensorFlow's eager ops capture the
#: caller's stack (module docstring). PyTorch's do not (unless the user asked for it, as
#: ``torch.autograd.set_detect_anomaly`` does, which a fresh stack would not change), and
#: its grad mode and autocast state are per thread, so its steps stay on the job's thread
#: where the program's own ``build`` set them.
FRESH_STACK_FRAMEWORKS: frozenset[str] = frozenset({"tensorflow"})


class StepAbandoned(BaseException):
    """Raised inside the step's thread when its caller was interrupted (a
    BaseException, as KeyboardInterrupt is, so that the step's ``except Exception``
    cannot swallow it)."""


def _raise_in(thread: threading.Thread, exc_type: type[BaseException]) -> None:
    """Ask ``thread`` to raise ``exc_type`` at its next bytecode
    (``PyThreadState_SetAsyncExc``, CPython's C API; the standard library has no
    Python-level equivalent)."""
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type)
        )


class StepThread:
    """A daemon thread that runs callables one at a time on a fresh stack; a context
    manager (the thread ends on exit).

    :meth:`call` hands one callable over and waits for its result. An exception of the
    callable is raised in the caller, with the callable's frames in its traceback. An
    exception that reaches the caller while it waits (the point deadline's signal,
    KeyboardInterrupt) gets ``step_stack`` (the thread's stack at that moment, a
    ``traceback.StackSummary``, read by
    :func:`crossover_study.measure.watchdog.stopped_where`), is raised in the thread as
    :class:`StepAbandoned`, and is re-raised in the caller once the callable has
    returned; the thread is then given up (it ends after that call) and :meth:`call`
    raises RuntimeError.

    The caller waits for the callable to return, however long that takes, so that
    nothing is measured beside a step still running. A step stuck in Python ends at
    once; one stuck where Python cannot raise (a sleep, a C call) keeps the caller
    waiting, and the point deadline's stage 2 ends the process
    (:mod:`crossover_study.measure.watchdog`). It is never left behind with the
    exception pending: CPython 3.11 keeps the interpreter's eval breaker set until the
    target thread takes a pending asynchronous exception, which slows every other
    thread's Python (seen here: a later point's tracer calibration ran past its
    deadline). A second exception during that wait (a second Ctrl-C) is raised at
    once, the step left behind."""

    def __init__(self, name: str = "crossover-step"):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._given_up = False
        self._thread.start()

    def _serve(self) -> None:
        # Short on purpose: this frame sits above every step (module docstring).
        try:
            while (job := self._jobs.get()) is not None:
                fn, outcome, done = job
                try:
                    outcome.append((True, fn()))
                except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                    outcome.append((False, exc))
                finally:
                    done.set()
        except StepAbandoned:
            pass  # taken after the step returned: the thread was given up, it ends

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` run in the thread; its result (or its exception, raised here)."""
        if self._given_up:
            raise RuntimeError("the step thread was given up after an interrupted step")
        outcome: list = []
        done = threading.Event()
        self._jobs.put((fn, outcome, done))
        try:
            done.wait()
        except BaseException as exc:
            frame = sys._current_frames().get(self._thread.ident)  # noqa: SLF001 - CPython's
            if frame is not None:
                exc.step_stack = traceback.extract_stack(frame)
            self._given_up = True
            self._jobs.put(None)  # the thread ends once the step has
            _raise_in(self._thread, StepAbandoned)
            # The thread's end, not ``done``: the pending exception may arrive anywhere
            # in the thread, even inside ``done.set()``; it ends after this call.
            self._thread.join()
            raise
        returned, value = outcome[0]
        if not returned:
            raise value
        return value

    def alive(self) -> bool:
        """Whether the thread is still running (serving, or finishing a given-up step)."""
        return self._thread.is_alive()

    def close(self) -> None:
        """End the thread once it is idle (nothing to do after an interrupted call: the
        thread ended with it)."""
        if not self._given_up:
            self._jobs.put(None)
            self._thread.join()

    def __enter__(self) -> StepThread:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
