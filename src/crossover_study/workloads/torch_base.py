"""The shared part of the seed cases' one-device PyTorch programs: the workload base
class (placing data, the step as each variant runs it: eager, ``torch.compile``, a
CUDA graph; reading the loss back), the CUDA-graph replay, the compiler check and
torch.compile's counters, Keras's defaults (Adam epsilon, Glorot init).

The per-case classes are :mod:`crossover_study.workloads.torch_cases`. Import only inside a job that has already pinned its
threads (``runner``): importing torch reads ``OMP_NUM_THREADS``.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
from pathlib import Path

import torch
from torch import nn

from crossover_study.study.applicability import require
from crossover_study.study.program_traits import loss_kind
from crossover_study.workloads import Unavailable, loss_read_every

#: Keras' Adam default epsilon (keras.optimizers.Adam, epsilon=1e-7); torch's is 1e-8.
KERAS_ADAM_EPS = 1e-7


def _compile_count() -> int:
    """Graphs torch.compile (dynamo) has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


#: torch.compile's cache counters (``torch._dynamo.utils.counters``) recorded per point:
#: Inductor's FX graph cache and AOTAutograd's cache. A hit means a kernel or graph came
#: from a cache instead of being compiled, which shortens the first step. The names are
#: the same in torch 2.11 (the GPU reference machine) and 2.13 (the lock).
COMPILE_CACHE_COUNTERS: tuple[tuple[str, str], ...] = (
    ("inductor", "fxgraph_cache_hit"),
    ("inductor", "fxgraph_cache_miss"),
    ("inductor", "fxgraph_cache_bypass"),
    ("aot_autograd", "autograd_cache_hit"),
    ("aot_autograd", "autograd_cache_miss"),
    ("aot_autograd", "autograd_cache_bypass"),
)


def _compile_cache_counts() -> dict[str, int]:
    """Current values of :data:`COMPILE_CACHE_COUNTERS` in this process."""
    from torch._dynamo.utils import counters

    return {name: int(counters[group][name]) for group, name in COMPILE_CACHE_COUNTERS}


def compile_toolchain_missing(device: str) -> str | None:
    """Why ``torch.compile`` (Inductor) cannot build kernels for ``device`` here, or None.

    On the CPU Inductor compiles C++ with ``$CXX``, else ``g++``
    (``torch._inductor.config.cpp.cxx``); on CUDA Triton builds a C launcher for each
    kernel with ``$CC``, else ``gcc``, else ``clang`` (``triton/runtime/build.py``), and
    both include ``Python.h`` from ``sysconfig.get_paths()["include"]``. Checked before
    anything is built so that a machine without them gives a row that says so, not a
    traceback from inside the first compiled step.
    """
    if device == "cuda":
        cc = os.environ.get("CC")
        found = shutil.which(cc) if cc else (shutil.which("gcc") or shutil.which("clang"))
        if found is None:
            wanted = f"$CC={cc!r}" if cc else "gcc or clang"
            return (
                f"torch.compile on CUDA needs a C compiler for Triton's kernel launchers: "
                f"{wanted} not found on PATH"
            )
    else:
        cxx = os.environ.get("CXX") or "g++"
        if shutil.which(cxx) is None:
            return f"torch.compile on the CPU needs a C++ compiler: {cxx} not found on PATH"
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        return (
            f"torch.compile needs the Python headers to build its kernels: {include}/Python.h "
            "is missing (install the python3-dev package of this Python)"
        )
    return None


def check_torch_variant(variant: str, device: str, kind=frozenset({"one_device"})) -> None:
    """Raise NotApplicable for a variant no PyTorch one-device program of ``kind`` (traits
    of ``program_traits.KINDS``) has on ``device`` (the table's reason:
    :func:`crossover_study.study.applicability.applicability`) and Unavailable for
    ``compile`` without the compiler it builds with (:func:`compile_toolchain_missing`).
    Decided before anything is built."""
    require(variant, "torch", device, kind)
    if variant == "compile":
        missing = compile_toolchain_missing(device)
        if missing is not None:
            raise Unavailable(missing)


def glorot(module: nn.Module) -> nn.Module:
    """Keras Dense defaults: Glorot-uniform kernel, zero bias."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    return module


class TorchWorkload:
    steps_per_call = 1
    min_steps_per_block = 1
    loss_read_every = 1

    #: True for ports of a Keras ``fit`` program (the loss is read once per epoch).
    keras_fit = False
    #: True for a step that differentiates twice (torch.compile cannot: the table's
    #: ``double_backward`` row).
    double_backward = False
    #: True for a model with an LSTM layer (the LSTM-kernel variants apply).
    lstm = False

    def __init__(
        self, device: str, sizes: dict[str, int], variant: str = "eager", seed: int = 1234
    ):
        check_torch_variant(variant, device, self.kind())
        self.loss_read_every = loss_read_every(self, variant)
        #: copy_data_each_step: data stays in host memory and each step copies its batch
        #: to the device (a no-op copy on the CPU) instead of being placed once.
        self.copy_data = variant == "copy_data_each_step"
        self.variant = variant
        self.device = torch.device("cuda:0" if device == "cuda" else "cpu")
        self.sizes = dict(sizes)
        self.seed = seed
        self.step_index = 0
        self._loss = None

    def kind(self) -> frozenset[str]:
        """The traits of this program the applicability table reads
        (``program_traits.KINDS``): a one-device program, its LSTM, its double backward
        and its own loss-read interval."""
        traits = {"one_device"}
        if self.lstm:
            traits.add("lstm")
        if self.double_backward:
            traits.add("double_backward")
        return frozenset(traits) | loss_kind(self.loss_read_every)

    def _staged(self, array) -> torch.Tensor:
        """``array`` (numpy or tensor) placed once on the device, or kept on the host
        when the variant copies data every step."""
        tensor = torch.as_tensor(array)
        return tensor if self.copy_data else tensor.to(self.device)

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """A batch on the device: a no-op when pre-staged, a host copy otherwise."""
        return tensor.to(self.device) if self.copy_data else tensor

    def _order(self, n: int) -> torch.Tensor:
        """Per-epoch shuffle (as Keras fit's default), drawn where the data lives."""
        return torch.randperm(n, device=self.generator.device, generator=self.generator)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _optimizer(self, params, **kwargs) -> torch.optim.Optimizer:
        """Adam with Keras' epsilon; capturable (state on the device, no host sync in
        ``step``) when the step is captured in a CUDA graph."""
        capturable = self.variant == "cuda_graph"
        return torch.optim.Adam(params, eps=KERAS_ADAM_EPS, capturable=capturable, **kwargs)

    def _make_step(self, *example_batch: torch.Tensor, fixed_inputs: bool = False) -> None:
        """Set ``self.step(*batch) -> loss`` as the variant runs ``self.train_step``:
        as it is (eager and the factor variants), through ``torch.compile`` (mode
        ``reduce-overhead``), or captured whole in a CUDA graph and replayed.

        ``example_batch`` are device tensors of the batch's shapes (none when the step
        draws its own data). ``fixed_inputs``: they are the workload's own pre-staged
        tensors, passed unchanged to every step (s001's x and t); the graph then reads
        them in place and a replay copies nothing, as the eager step copies nothing.
        Capture follows the PyTorch docs' whole-network recipe: three warm-up steps on a
        side stream, gradients set to None, then capture.
        """
        if self.variant == "compile":
            torch._dynamo.reset()  # noqa: SLF001 - torch's documented reset of earlier compiles
            self.step = torch.compile(self.train_step, mode="reduce-overhead")
            self._compile_base = _compile_count()
            self._cache_base = _compile_cache_counts()
        elif self.variant == "cuda_graph":
            static = list(example_batch) if fixed_inputs else [b.clone() for b in example_batch]
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(3):
                    self.train_step(*static)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_loss = self.train_step(*static)
            self.step = graph_replay(graph, static, static_loss)
        else:
            self.step = self.train_step

    def compile_cache(self) -> dict[str, int] | None:
        """torch.compile cache hits and misses since this point's set-up
        (:data:`COMPILE_CACHE_COUNTERS`; None when nothing is compiled)."""
        if self.variant != "compile":
            return None
        now = _compile_cache_counts()
        return {name: now[name] - self._cache_base.get(name, 0) for name in now}

    def trace_count(self) -> int | None:
        """Graphs torch.compile made for this workload (None: nothing is compiled)."""
        if self.variant != "compile":
            return None
        return _compile_count() - self._compile_base

    def _read_on_schedule(self, loss: torch.Tensor) -> None:
        """Count one step of an epoch loop (the Keras ``fit`` ports) and read ``loss``
        back after every ``loss_read_every``-th step (once per epoch by default, every
        step for ``read_loss_every_step``); the last loss is kept for :meth:`loss`."""
        self.step_index += 1
        self._last_loss = loss
        if self.step_index % self.loss_read_every == 0:
            self._loss = loss.item()

    def loss(self) -> float:
        last = getattr(self, "_last_loss", None)
        if last is not None:  # read outside the timed blocks
            return float(last.detach())
        return float("nan") if self._loss is None else float(self._loss)


def graph_replay(graph, static: list[torch.Tensor], static_loss: torch.Tensor):
    """``replay(*batch) -> loss`` of a captured training step: copies each batch tensor
    into the graph's static input unless it *is* that input (pre-staged data that the
    step reads in place), replays ``graph`` (anything with ``replay()``) and returns the
    static loss tensor, which the replay overwrote."""

    def replay(*batch: torch.Tensor) -> torch.Tensor:
        for dst, src in zip(static, batch, strict=True):
            if src is not dst:
                dst.copy_(src, non_blocking=True)
        graph.replay()
        return static_loss

    return replay
