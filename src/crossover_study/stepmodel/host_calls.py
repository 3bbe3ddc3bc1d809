"""What a training step does on the host that an accelerator cannot take from it: the
values it reads back from the device, and the host-side data it makes, each with the
line of the user's code that does it.

Counted during the step's count (:mod:`crossover_study.stepmodel.counts`), never in a
timed block: :class:`HostCalls` watches one call of the program through CPython's
profiling hook (``sys.setprofile``, the hook ``cProfile`` uses; the thread that runs the
step only) and keeps the calls made *from the user's code*: a frame outside the Python
installation's library folders and outside this package (the harness's own loss read,
on the ``loss_read_every`` schedule, is the library's and is priced apart).

- **reads** (device-to-host): on an accelerator each one waits for the device to finish
  what was queued, a synchronisation. PyTorch: ``Tensor.item``, ``.tolist``,
  ``.numpy``, ``.cpu`` (C methods, seen as ``c_call`` events) and ``float(t)``,
  ``int(t)``, ``bool(t)`` (a type's slot calls no function the hook sees; the op
  counter reports them: their ATen op ``_local_scalar_dense``, :meth:`HostCalls.scalar_read`).
  TensorFlow: ``EagerTensor.numpy``, ``__float__``, ``__int__``, ``__bool__``,
  ``__index__``, ``__array__`` (Python methods of ``tensorflow/python/framework/ops.py``).
- **host data**: NumPy calls, Python's ``random`` module, and a tensor made from host
  data inside the step (``torch.tensor``, ``torch.as_tensor``, ``torch.from_numpy``).
  A CUDA graph captures the device's kernels once and replays them; host-side work and
  data are not in the graph, so a step that makes them cannot be replayed as written
  (PyTorch's CUDA graphs notes: "the captured work must not … synchronize with the CPU
  … [or] use CPU-side data or logic that changes from replay to replay";
  https://pytorch.org/docs/stable/notes/cuda.html#constraints).

Hand-rolled on ``sys.setprofile``: the profilers that read Python calls (``cProfile``,
``torch.profiler``'s Python tracer) give functions and times, not the calling line of
the user's code per call, which the answer quotes.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections import Counter
from dataclasses import dataclass, field

#: PyTorch tensor methods that read a value back to the host (C methods: ``c_call``).
TORCH_READS = frozenset({"item", "tolist", "numpy", "cpu"})
#: TensorFlow EagerTensor methods that read a value back (Python methods in ops.py), by
#: how the user's code calls them.
TF_READS = {
    "numpy": ".numpy()",
    "__float__": "float(t)",
    "__int__": "int(t)",
    "__bool__": "bool(t)",
    "__index__": "an index from a tensor",
    "__array__": "np.asarray(t)",
}
#: Functions that make a tensor from host data (PyTorch).
TORCH_FROM_HOST = frozenset({"tensor", "as_tensor", "from_numpy"})
#: This package's folder: its frames are the library's, never the user's.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _library_folders() -> tuple[str, ...]:
    """The Python installation's library folders (standard library, site-packages)."""
    paths = sysconfig.get_paths()
    found = {os.path.abspath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(sorted(found)) + (_PACKAGE,)


def is_user_file(filename: str, folders: tuple[str, ...] | None = None) -> bool:
    """Whether ``filename`` (a code object's ``co_filename``) is the user's code: a real
    file outside the library folders and this package (``<string>`` and other
    pseudo-files are not)."""
    if not filename or filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    return not any(path.startswith(f + os.sep) for f in folders or _library_folders())


@dataclass
class HostCalls:
    """The reads and host-data calls of the user's code seen while active (a context
    manager): ``reads`` and ``host_data`` are :class:`~collections.Counter` objects of
    ``(what, "file.py:line")``, e.g. ``(".item()", "mine.py:23")``. Not re-entrant; one
    thread (the one that enters it)."""

    reads: Counter = field(default_factory=Counter)
    host_data: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._folders = _library_folders()
        self._user: dict[str, bool] = {}
        self._previous = None
        self._inside_read = 0

    def _is_user(self, frame) -> bool:
        name = frame.f_code.co_filename
        known = self._user.get(name)
        if known is None:
            known = self._user[name] = is_user_file(name, self._folders)
        return known

    def _where(self, frame) -> str:
        return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"

    def user_line(self) -> str | None:
        """The innermost frame of the user's code on the calling thread's stack, as
        ``file.py:line``; None where the stack holds none (the library's own call)."""
        frame = sys._getframe(1)  # noqa: SLF001 - the stack of the op being counted
        while frame is not None:
            if self._is_user(frame):
                return self._where(frame)
            frame = frame.f_back
        return None

    def scalar_read(self) -> None:
        """Count one scalar read seen by the op counter (``_local_scalar_dense``:
        ``.item()``, ``float(t)``, ``int(t)``, ``bool(t)``) where the user's code made
        it; a read inside ``.item()`` already counted by its ``c_call`` is not counted
        twice."""
        if self._inside_read:
            return
        where = self.user_line()
        if where is not None:
            self.reads[("a scalar read (.item(), float(t), bool(t))", where)] += 1

    def _profile(self, frame, event, arg):
        if event == "c_call":
            name = getattr(arg, "__name__", "")
            owner = getattr(arg, "__self__", None)
            module = type(owner).__module__ if owner is not None else ""
            if name in TORCH_READS and module.startswith("torch"):
                if self._is_user(frame):
                    self.reads[(f".{name}()", self._where(frame))] += 1
                self._inside_read += 1
            elif self._is_user(frame):
                origin = getattr(arg, "__module__", None) or module
                if origin and origin.split(".")[0] == "numpy":
                    self.host_data[("NumPy", self._where(frame))] += 1
                elif origin == "torch" and name in TORCH_FROM_HOST:
                    self.host_data[(f"torch.{name} from host data", self._where(frame))] += 1
                elif origin in ("random", "_random"):
                    self.host_data[("Python's random", self._where(frame))] += 1
        elif event in ("c_return", "c_exception"):
            name = getattr(arg, "__name__", "")
            owner = getattr(arg, "__self__", None)
            module = type(owner).__module__ if owner is not None else ""
            if name in TORCH_READS and module.startswith("torch") and self._inside_read:
                self._inside_read -= 1
        elif event == "call":
            code, caller = frame.f_code, frame.f_back
            if caller is None or not self._is_user(caller):
                return
            path = code.co_filename.replace(os.sep, "/")
            if code.co_name in TF_READS and path.endswith("tensorflow/python/framework/ops.py"):
                self.reads[(TF_READS[code.co_name], self._where(caller))] += 1
            elif "/numpy/" in path:
                self.host_data[("NumPy", self._where(caller))] += 1
            elif path.endswith("/random.py") and "/site-packages/" not in path:
                self.host_data[("Python's random", self._where(caller))] += 1

    def __enter__(self) -> HostCalls:
        self._previous = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(self._previous)


def per_step_text(found: Counter, steps: int) -> str | None:
    """``found`` (:attr:`HostCalls.reads` or ``host_data``) as the answer quotes it: each
    kind of call with the lines that make it and how many per step, the most frequent
    first, e.g. ``.item() at mine.py:49 (2 per step); NumPy at mine.py:37, 38 (3 per
    step)``; None when empty. Raises ValueError for ``steps`` below 1."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if not found:
        return None
    kinds: dict[str, Counter] = {}
    for (what, where), n in found.items():
        kinds.setdefault(what, Counter())[where] += n
    parts = []
    for what, lines in sorted(kinds.items(), key=lambda kv: -sum(kv[1].values())):
        files = {w.rsplit(":", 1)[0] for w in lines}
        ordered = sorted(lines, key=lambda w: (w.rsplit(":", 1)[0], int(w.rsplit(":", 1)[1])))
        if len(files) == 1:
            named = f"{next(iter(files))}:" + ", ".join(w.rsplit(":", 1)[1] for w in ordered)
        else:
            named = ", ".join(ordered)
        parts.append(f"{what} at {named} ({sum(lines.values()) / steps:.3g} per step)")
    return "; ".join(parts)


def columns(calls: HostCalls, steps: int) -> dict:
    """The count's columns of ``calls`` over ``steps`` training steps:
    ``step_host_reads`` (the user's device-to-host reads per step), ``step_host_reads_where``
    and ``step_host_data_where`` (:func:`per_step_text`)."""
    return {
        "step_host_reads": sum(calls.reads.values()) / steps,
        "step_host_reads_where": per_step_text(calls.reads, steps),
        "step_host_data_where": per_step_text(calls.host_data, steps),
    }
