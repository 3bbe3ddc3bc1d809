"""Framework set-up inside a measuring job: threads, device visibility, faults, the
workload of a point. The device probe is :mod:`crossover_study.measure.device_probe`.

Every function here imports its framework lazily, after :func:`pin_thread_env` has set
the thread variables the framework reads at import time.
"""

from __future__ import annotations

import errno
import os
import sys

from crossover_study.core.errors import DeviceMissingError
from crossover_study.core.paths import portable_path
from crossover_study.measure.device_probe import gpu_names, tpu_strategy, visible_devices_text

__all__ = [
    "COMPILE_CACHE_ENV",
    "FRAMEWORK_MODULES",
    "OOM_MARKERS",
    "THREAD_ENV",
    "DeviceLostError",
    "device_fault",
    "fresh_compile_cache",
    "import_framework",
    "initialise_device",
    "is_oom",
    "logical_devices",
    "make_workload",
    "not_importable",
    "pin_thread_env",
    "release_memory",
    "thread_settings",
    "workload_class",
]

#: Environment variables that size the CPU thread pools of torch, TensorFlow, MKL and
#: OpenMP; set before the framework is imported.
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")


def pin_thread_env(threads: int) -> None:
    """Set the thread variables to ``threads`` (call before importing a framework)."""
    for name in THREAD_ENV:
        os.environ[name] = str(threads)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def import_framework(framework: str, device: str, threads: int, logical_cpus: int = 1):
    """Import ``framework`` (torch or tensorflow), pin its intra-op threads to
    ``threads`` and inter-op threads to 1, and hide GPUs from TensorFlow in ``cpu`` jobs
    so that nothing is placed on a GPU by default. Returns the module.

    ``logical_cpus`` > 1 (TensorFlow, ``cpu`` jobs of ``mirrored`` or ``mirrored_fit``
    points) splits the one physical CPU device into that many logical CPU devices (one
    per replica of ``MirroredStrategy``) with
    ``tf.config.set_logical_device_configuration``; this must happen before TensorFlow
    initialises its devices, so a process that already initialised them with fewer
    devices raises RuntimeError naming both counts. The
    logical devices share the job's one intra-op pool of ``threads`` threads.

    Float precision is pinned to fp32 here, once per process before any point
    (:func:`crossover_study.workloads.precision.pin_fp32`: TF32 off in both frameworks, cuDNN
    included); the ``tf32`` variant turns it on for its own point only.
    """
    from crossover_study.workloads.precision import pin_fp32

    if logical_cpus < 1:
        raise ValueError(f"logical_cpus must be at least 1, got {logical_cpus}")
    if framework == "torch":
        import torch

        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass  # settable once per process; thread_settings() records the actual value
        pin_fp32("torch")
        return torch
    if framework == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        if device == "cpu":
            tf.config.set_visible_devices([], "GPU")
            if logical_cpus > 1:
                _split_cpu(tf, logical_cpus)
        pin_fp32("tensorflow")
        return tf
    raise ValueError(f"unknown framework {framework!r}: expected torch or tensorflow")


#: The module each framework is imported as.
FRAMEWORK_MODULES: dict[str, str] = {"torch": "torch", "tensorflow": "tensorflow"}


def not_importable(framework: str, exc: ImportError | None = None) -> str | None:
    """Why ``framework`` cannot be imported by this Python (``exc``: the error an import
    already raised; else the import is tried here), or None when it imports. The text
    names the interpreter, so a row says which environment lacked it."""
    if exc is None:
        import importlib

        try:
            importlib.import_module(FRAMEWORK_MODULES[framework])
        except ImportError as error:
            exc = error
        else:
            return None
    return (
        f"{framework} cannot be imported by this Python ({portable_path(sys.executable)}): "
        f"{type(exc).__name__}: {exc}"
    )


def _split_cpu(tf, n: int) -> None:
    """Configure ``n`` logical CPU devices on the first physical CPU (before TensorFlow
    initialises; later, a process already showing ``n`` or more is accepted)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)]
        )
    except RuntimeError as exc:
        have = len(tf.config.list_logical_devices("CPU"))
        if have < n:
            raise RuntimeError(
                f"{n} logical CPU devices are needed for mirrored replicas, but TensorFlow "
                f"was initialised with {have} before they could be configured: {exc}"
            ) from exc


def logical_devices(framework: str) -> list[str]:
    """TensorFlow's logical devices in this process (CPU:0, CPU:1, ... after a split;
    empty for torch, which has none)."""
    if framework != "tensorflow":
        return []
    import tensorflow as tf

    return [d.name for d in tf.config.list_logical_devices()]


def thread_settings(framework: str) -> tuple[int, int]:
    """(intra-op, inter-op) CPU threads the framework actually uses in this process."""
    if framework == "torch":
        import torch

        return torch.get_num_threads(), torch.get_num_interop_threads()
    import tensorflow as tf

    t = tf.config.threading
    return t.get_intra_op_parallelism_threads(), t.get_inter_op_parallelism_threads()


def threads_in_effect(framework: str) -> int | None:
    """The intra-op CPU threads ``framework`` uses now in this process (read after a
    point's timed blocks: a program may have set its own), or None when it cannot be
    read (the framework not imported)."""
    try:
        return thread_settings(framework)[0]
    except (ImportError, RuntimeError, AttributeError):
        return None


def restore_threads(framework: str, threads: int) -> None:
    """Pin PyTorch's intra-op threads back to ``threads`` (the job's) after a point whose
    program set its own (``torch.set_num_threads`` in a plug-in), so that the job's next
    point is timed with the job's threads. TensorFlow's cannot be changed once it ran
    (neither by a program), so nothing is done for it."""
    if framework == "torch" and "torch" in sys.modules:
        import torch

        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


#: Texts of allocation failures that are not raised as an out-of-memory type, compared
#: case-insensitively with the exception's text. Each entry names where the text comes from.
OOM_MARKERS: tuple[str, ...] = (
    # PyTorch's CUDA caching allocator: "CUDA out of memory. Tried to allocate ..."
    # (c10/cuda/CUDACachingAllocator.cpp), and the generic text of many others.
    "out of memory",
    # cuBLAS and cuDNN report a failed workspace or handle allocation as a status code
    # (cublas_api.h, cudnn_graph.h).
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
    "cudnn_status_not_enough_workspace",
    # The CUDA runtime and driver (cuda_runtime_api.h, cuda.h).
    "cudaerrormemoryallocation",
    "cuda_error_out_of_memory",
    # TensorFlow's allocators: "OOM when allocating tensor with shape[...]"
    # (core/common_runtime/bfc_allocator.cc, the CPU's mklcpu allocator too) and the
    # status code's name (RESOURCE_EXHAUSTED, absl::StatusCode).
    "oom when allocating",
    "resource_exhausted",
    # PyTorch's CPU allocator, a RuntimeError: "[enforce fail at alloc_cpu.cpp:127]
    # err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate N
    # bytes. Error code 12 (Cannot allocate memory)" (c10/core/impl/alloc_cpu.cpp).
    "can't allocate memory",
    # The operating system's ENOMEM, strerror(12) in glibc and musl, as an allocator or
    # mmap reports it ("[Errno 12] Cannot allocate memory"; an OSError is also matched
    # by its errno in is_oom).
    "cannot allocate memory",
    # NumPy's _ArrayMemoryError ("Unable to allocate 8.00 PiB for an array with shape
    # ...": numpy/_core/_exceptions.py), when re-raised as another type.
    "unable to allocate",
    # A C++ operator new that failed, as a library's text carries it (pybind11 raises
    # MemoryError for it, matched by type).
    "std::bad_alloc",
)


def is_oom(exc: BaseException) -> bool:
    """True when ``exc`` is an out-of-memory error of the host or of either framework:
    a :class:`MemoryError` (NumPy's ``_ArrayMemoryError`` included), an ``OSError`` with
    ``errno`` ENOMEM, torch's ``OutOfMemoryError``, TensorFlow's
    ``ResourceExhaustedError``, or any exception whose text holds one of
    :data:`OOM_MARKERS` (torch's CPU allocator, a cuBLAS or cuDNN allocation
    failure...)."""
    if isinstance(exc, MemoryError):
        return True
    if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
        return True
    name = type(exc).__name__
    if name in ("OutOfMemoryError", "ResourceExhaustedError"):
        return True
    text = str(exc).lower()
    return any(marker in text for marker in OOM_MARKERS)


class DeviceLostError(RuntimeError):
    """The device stopped running work after a point failed (a sticky CUDA error such
    as an illegal memory access poisons the process's context): the job must end so
    that a fresh process measures the point again (the journal keeps the others)."""


def device_fault(framework: str, device: str) -> str | None:
    """Why ``device`` no longer runs work in this process, or None when it does.

    Runs one tiny operation on the device and reads it back (torch: ``torch.ones(1) + 1``
    on ``cuda:0`` and ``torch.cuda.synchronize``; TensorFlow: the same under
    ``/GPU:0``). A sticky CUDA error (illegal address, launch failure, device-side
    assert) makes every later call fail, which this returns as text; an out-of-memory
    error does not. Always None for ``cpu`` and ``tpu``.
    """
    if device not in ("cuda", "cuda_multi"):
        return None
    try:
        if framework == "torch":
            import torch

            value = (torch.ones(1, device="cuda:0") + 1).item()
            torch.cuda.synchronize()
        else:
            import tensorflow as tf

            with tf.device("/GPU:0"):
                value = float((tf.ones([1]) + 1).numpy()[0])
    except Exception as exc:  # noqa: BLE001 - any failure here means the device is gone
        return (
            f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        )
    return None if value == 2.0 else f"1 + 1 gave {value} on the device"


def release_memory(framework: str, device: str) -> None:
    """Free what the last point left before the next one sets up: collect reference
    cycles (a workload holding its own bound methods, an exception's frames), and on
    CUDA return torch's cached blocks to the driver (``torch.cuda.empty_cache``), so
    that a large point is not recorded ``oom`` because of its predecessor's tensors."""
    import gc

    gc.collect()
    if framework == "torch" and device in ("cuda", "cuda_multi"):
        import torch

        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()


#: Environment variables of the caches that torch.compile reads and writes on disk:
#: Inductor's (FX graphs, generated code, C++ builds) and Triton's (compiled kernels).
COMPILE_CACHE_ENV: tuple[str, ...] = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def fresh_compile_cache(root: str | None = None) -> str:
    """Point torch.compile's on-disk caches (:data:`COMPILE_CACHE_ENV`) at a new empty
    folder under ``root`` (the system's temporary folder by default) and return it.

    Call before torch is imported, once per measuring job: a cache left by an earlier
    run would make ``first_step_s`` of a ``compile`` point depend on that run (a
    cache hit skips compilation). The points of one job share the folder; each row
    records its hits and misses (``compile_cache``). The caller removes the folder.
    """
    import tempfile

    folder = tempfile.mkdtemp(prefix="crossover-compile-cache-", dir=root)
    for name, sub in zip(COMPILE_CACHE_ENV, ("inductor", "triton"), strict=True):
        os.environ[name] = os.path.join(folder, sub)
    return folder


def workload_class(framework: str, case: str):
    """The workload class of seed ``case`` in ``framework``: its registered entry point
    (:mod:`crossover_study.study.cases`, a ``module:Class`` of the package; imports the
    framework). Raises KeyError for an unknown case or framework and ValueError for a
    plug-in case (its entry point is built by
    :func:`crossover_study.workloads.plugins.plugin_workload`)."""
    import importlib

    from crossover_study.study import cases

    own = cases.get(case)
    if not own.builtin:
        raise ValueError(f"{case} is a plug-in case: build it with plugins.plugin_workload")
    module, name = own.entry_point(framework)
    return getattr(importlib.import_module(module), name)


def make_workload(point, threads: int):
    """The workload that measures ``point`` (a :class:`~crossover_study.study.spec.PointSpec`)
    in a job of ``threads`` CPU threads. Imports the framework's workload modules.

    The program comes from the program table (:func:`crossover_study.study.programs.program_of`,
    which raises ``workloads.NotApplicable`` with the reason before anything is built):

    - ``ddp_step`` (variant ``ddp``, torch):
      :class:`~crossover_study.workloads.torch_ddp.DDPWorkload`; ``strategy_step`` of
      variant ``mirrored`` (TensorFlow):
      :func:`~crossover_study.workloads.tf_strategy.mirrored_workload` and
      ``keras_fit_mirrored`` (variant ``mirrored_fit``, s004):
      :func:`~crossover_study.workloads.tf_strategy.mirrored_fit_workload` (one replica
      is each one's scaling baseline, the same program on one device);
    - ``strategy_step`` (variant ``strategy_step``):
      :class:`~crossover_study.workloads.tf_strategy_step.StrategyWorkload` under
      ``OneDeviceStrategy`` on ``cpu`` (``/cpu:0``) and ``cuda`` (``/gpu:0``) and under
      this host's ``TPUStrategy`` on ``tpu``, with the point's global batch (its batch
      rounded to divide over ``tpu_cores``, :meth:`PointSpec.global_batch`);
    - ``plugin`` (a case of the user's own, :mod:`crossover_study.study.cases`): what its
      plug-in's entry point builds (:func:`~crossover_study.workloads.plugins.plugin_workload`);
    - any other program: the case's one-device program (:func:`workload_class`).

    Raises ``workloads.NotApplicable`` where the point's variant does not apply (the
    first reason of :func:`crossover_study.study.applicability.applicability`, in the order
    of its table: e.g. an ordinary variant of a replicated point, a variant of the other
    framework, a replica variant of a case without replicas, an ordinary point on
    ``cuda_multi``, any variant but ``strategy_step`` on ``tpu``; then the workloads'
    own), and :class:`DeviceMissingError` when fewer GPUs
    are visible than replicas or no TPU is.
    """
    from crossover_study.study.applicability import require
    from crossover_study.study.program_traits import case_kind
    from crossover_study.study.programs import program_of
    from crossover_study.study.spec import REPLICA_VARIANTS

    case, device, sizes = point.case, point.device, dict(point.sizes)
    kind = case_kind(case, point.framework) | ({"replicated"} if point.replicas > 1 else set())
    require(point.variant, point.framework, device, kind, case=case)
    program = program_of(case, point.framework, device, point.variant)
    if program == "plugin":
        from crossover_study.study import cases
        from crossover_study.workloads.plugins import plugin_workload

        return plugin_workload(cases.get(case), point.framework, device, sizes, point.variant)
    if point.variant in REPLICA_VARIANTS:
        if device == "cuda_multi":
            visible = len(gpu_names(point.framework))
            if visible < point.replicas:
                raise DeviceMissingError(
                    f"{point.replicas} replicas need {point.replicas} GPUs; {visible} "
                    f"visible to {point.framework} (CUDA_VISIBLE_DEVICES={visible_devices_text()})"
                )
        if program == "ddp_step":
            from crossover_study.workloads.torch_ddp import DDPWorkload

            return DDPWorkload(case, device, sizes, point.replicas, point.scaling, threads)
        from crossover_study.workloads.tf_strategy import mirrored_fit_workload, mirrored_workload

        build = mirrored_fit_workload if point.variant == "mirrored_fit" else mirrored_workload
        return build(case, device, sizes, point.replicas, point.scaling, threads)
    if program == "strategy_step":
        from crossover_study.workloads.tf_strategy_step import StrategyWorkload, one_device_strategy

        strategy = tpu_strategy() if device == "tpu" else one_device_strategy(device)
        return StrategyWorkload(case, device, sizes, strategy, global_batch=point.global_batch())
    return workload_class(point.framework, case)(device, sizes, point.variant)


def initialise_device(
    framework: str, device: str, lstm: bool = False, settle: bool = True
) -> float:
    """Seconds to initialise ``device`` and the framework's lazily loaded training path.

    One throwaway training step of a 4 → 4 dense model with Adam (torch: a module and
    ``optim.Adam``; TensorFlow: Keras ``fit`` for one step), synchronised; with
    ``lstm`` (a job of an LSTM case) the model starts with a 4-unit LSTM layer, so that
    the LSTM path's one-time set-up (cuDNN's handle and library load on CUDA, the
    recurrent kernels' first use) is paid here rather than by the job's first LSTM
    point. This is what every program pays once before its first real step (CUDA
    context, cuBLAS handles, lazy imports); the runner adds it to each point's cold
    start so that cold starts are comparable whichever point a job measures first.
    ``settle``: end with :func:`settle_heap` (the measuring job's process); False in a
    process that measures a point in the heap state a user's own fresh process has
    (:mod:`crossover_study.measure.fresh_point`).
    """
    import time

    start = time.perf_counter()
    if framework == "torch":
        import torch

        dev = torch.device("cuda:0" if device in ("cuda", "cuda_multi") else "cpu")
        model = torch.nn.Linear(4, 4).to(dev)
        params = list(model.parameters())
        x = torch.ones(2, 4, device=dev)
        if lstm:
            rnn = torch.nn.LSTM(4, 4, batch_first=True).to(dev)
            params += list(rnn.parameters())
            x = rnn(torch.ones(2, 3, 4, device=dev))[0][:, -1, :]
        opt = torch.optim.Adam(params)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        loss.item()
    else:
        import numpy as np
        from tensorflow import keras

        if lstm:
            layers = [keras.Input(shape=(3, 4)), keras.layers.LSTM(4), keras.layers.Dense(4)]
            x = np.ones((2, 3, 4), dtype=np.float32)
        else:
            layers = [keras.Input(shape=(4,)), keras.layers.Dense(4)]
            x = np.ones((2, 4), dtype=np.float32)
        model = keras.Sequential(layers)
        model.compile(optimizer="adam", loss="mse", jit_compile=False, steps_per_execution=1)
        model.fit(x, np.ones((2, 4), dtype=np.float32), batch_size=2, epochs=1, verbose=0)
    if settle:
        settle_heap()
    return time.perf_counter() - start


#: Bytes of :func:`settle_heap`'s block: glibc's largest dynamic mmap threshold
#: (DEFAULT_MMAP_THRESHOLD_MAX, 4 MiB x sizeof(long) = 32 MiB on 64-bit; glibc
#: malloc/malloc.c), less room for the chunk's header and alignment.
SETTLED_BLOCK_BYTES = 32 * 2**20 - 2**16


def settle_heap() -> None:
    """Put the process's C heap in the state of a long-running training process:
    malloc and free one block of :data:`SETTLED_BLOCK_BYTES` (never written: no page is
    touched). glibc serves it with mmap and, when it is freed, raises its mmap
    threshold to the block's size and its trim threshold to twice that (the dynamic
    thresholds of mallopt(3)), as a program that has loaded its data and built its model
    has. Why: without it a measuring job's points ran in whatever state its earlier
    work left: s004-lstm's PyTorch step (batch 32, 180 units, 60 steps) took some 7 000
    page faults a step when nothing large had been freed before it and none after the
    job's rates had freed their 64 MiB buffers in the same process (2-core VM,
    2026-12-04), its step time within 4 % either way while the step-time model priced
    the faults at 13 to 37 ms. A user's training loop has long passed such a free when
    its steps are timed. Hand-rolled: NumPy's ``empty`` is the one portable malloc."""
    import numpy as np

    block = np.empty(SETTLED_BLOCK_BYTES, dtype=np.uint8)
    del block
