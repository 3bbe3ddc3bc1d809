"""Framework set-up inside a measuring job: threads, device visibility, probe.

Every function here imports its framework lazily, after :func:`pin_thread_env` has set
the thread variables the framework reads at import time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .provenance import cpu_model

#: Environment variables that size the CPU thread pools of torch, TensorFlow, MKL and
#: OpenMP; set before the framework is imported.
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")


class DeviceMissingError(RuntimeError):
    """A device was asked for, is not visible, and the config says ``missing_device: fail``."""


@dataclass(frozen=True)
class DeviceProbe:
    """What the job saw of its device. ``reason`` says why it is unavailable."""

    available: bool
    device_name: str | None
    reason: str | None
    framework_version: str
    cuda_version: str | None
    visible: str  # the framework's own device list, as text


def pin_thread_env(threads: int) -> None:
    """Set the thread variables to ``threads`` (call before importing a framework)."""
    for name in THREAD_ENV:
        os.environ[name] = str(threads)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def import_framework(framework: str, device: str, threads: int):
    """Import ``framework`` (torch or tensorflow), pin its intra-op threads to
    ``threads`` and inter-op threads to 1, and hide GPUs from TensorFlow in ``cpu`` jobs
    so that nothing is placed on a GPU by default. Returns the module."""
    if framework == "torch":
        import torch

        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass  # settable once per process; thread_settings() records the actual value
        return torch
    if framework == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        if device == "cpu":
            tf.config.set_visible_devices([], "GPU")
        return tf
    raise ValueError(f"unknown framework {framework!r}: expected torch or tensorflow")


def thread_settings(framework: str) -> tuple[int, int]:
    """(intra-op, inter-op) CPU threads the framework actually uses in this process."""
    if framework == "torch":
        import torch

        return torch.get_num_threads(), torch.get_num_interop_threads()
    import tensorflow as tf

    t = tf.config.threading
    return t.get_intra_op_parallelism_threads(), t.get_inter_op_parallelism_threads()


def probe(framework: str, device: str) -> DeviceProbe:
    """Whether ``device`` is visible to ``framework`` in this process, and its name.

    ``cuda_multi`` and ``tpu`` are never available for timing (the harness has no
    replica or TPU variant yet): their probe says whether the hardware is there and why
    nothing is timed, so their rows are ``unavailable`` with that reason.
    """
    if device == "tpu":
        return _probe_tpu(framework)
    if device == "cuda_multi":
        return _probe_cuda_multi(framework)
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    cvd_text = "unset" if cvd is None else repr(cvd)
    if framework == "torch":
        import torch

        version, cuda = torch.__version__, torch.version.cuda
        if device == "cpu":
            return DeviceProbe(True, cpu_model(), None, version, cuda, "cpu")
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        visible = ", ".join(torch.cuda.get_device_name(i) for i in range(n)) or "no CUDA device"
        if n == 0:
            why = (
                "no CUDA device visible to torch "
                f"(torch {version}, built with CUDA {cuda or 'none'}; CUDA_VISIBLE_DEVICES={cvd_text})"
            )
            return DeviceProbe(False, None, why, version, cuda, visible)
        return DeviceProbe(True, torch.cuda.get_device_name(0), None, version, cuda, visible)

    import tensorflow as tf

    version = tf.__version__
    build = tf.sysconfig.get_build_info()
    cuda = build.get("cuda_version") if build.get("is_cuda_build") else None
    if device == "cpu":
        return DeviceProbe(True, cpu_model(), None, version, cuda, "CPU:0")
    gpus = tf.config.list_physical_devices("GPU")
    visible = ", ".join(g.name for g in gpus) or "no GPU"
    if not gpus:
        why = (
            "no GPU visible to TensorFlow "
            f"(tensorflow {version}, CUDA build: {bool(cuda)}; CUDA_VISIBLE_DEVICES={cvd_text})"
        )
        return DeviceProbe(False, None, why, version, cuda, visible)
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", gpus[0].name)
    return DeviceProbe(True, name, None, version, cuda, visible)


def _cvd_text() -> str:
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    return "unset" if cvd is None else repr(cvd)


def _versions(framework: str) -> tuple[str, str | None]:
    """(framework version, CUDA version it was built with or None)."""
    if framework == "torch":
        import torch

        return torch.__version__, torch.version.cuda
    import tensorflow as tf

    build = tf.sysconfig.get_build_info()
    return tf.__version__, build.get("cuda_version") if build.get("is_cuda_build") else None


def gpu_names(framework: str) -> list[str]:
    """Names of the GPUs ``framework`` sees in this process (empty without any)."""
    if framework == "torch":
        import torch

        if not torch.cuda.is_available():
            return []
        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    import tensorflow as tf

    return [g.name for g in tf.config.list_physical_devices("GPU")]


def tpu_names(framework: str) -> list[str]:
    """Names of the TPU devices ``framework`` sees (TensorFlow's logical TPU devices;
    torch has no TPU backend here, so always empty for torch)."""
    if framework == "torch":
        return []
    import tensorflow as tf

    return [d.name for d in tf.config.list_logical_devices("TPU")]


def _probe_tpu(framework: str) -> DeviceProbe:
    version, cuda = _versions(framework)
    if framework == "torch":
        why = f"torch has no TPU backend here (torch {version}; torch_xla is not used)"
        return DeviceProbe(False, None, why, version, cuda, "no TPU backend")
    tpus = tpu_names(framework)
    visible = ", ".join(tpus) or "no TPU"
    if not tpus:
        why = (
            f"no TPU visible to TensorFlow (tensorflow {version}; "
            "tf.config.list_logical_devices('TPU') is empty)"
        )
    else:
        why = (
            f"{len(tpus)} TPU device(s) visible to TensorFlow, but the harness has no TPU "
            "variant yet (TPUStrategy); nothing is timed under tpu"
        )
    return DeviceProbe(False, None, why, version, cuda, visible)


def _probe_cuda_multi(framework: str) -> DeviceProbe:
    version, cuda = _versions(framework)
    gpus = gpu_names(framework)
    visible = ", ".join(gpus) or "no GPU"
    if len(gpus) < 2:
        why = (
            f"cuda_multi needs at least 2 GPUs; {len(gpus)} visible to {framework} "
            f"({framework} {version}, built with CUDA {cuda or 'none'}; "
            f"CUDA_VISIBLE_DEVICES={_cvd_text()})"
        )
    else:
        why = (
            f"{len(gpus)} GPUs visible to {framework}, but the harness has no several-GPU "
            "(replica) variant yet; nothing is timed under cuda_multi"
        )
    return DeviceProbe(False, None, why, version, cuda, visible)


def is_oom(exc: BaseException) -> bool:
    """True when ``exc`` is an out-of-memory error of the host or of either framework."""
    if isinstance(exc, MemoryError):
        return True
    name = type(exc).__name__
    if name in ("OutOfMemoryError", "ResourceExhaustedError"):
        return True
    return "out of memory" in str(exc).lower()


def workload_class(framework: str, case: str):
    """The workload class of ``case`` in ``framework`` (imports the framework)."""
    if framework == "torch":
        from .workloads.torch_cases import WORKLOADS
    else:
        from .workloads.tf_cases import WORKLOADS
    return WORKLOADS[case]


def initialise_device(framework: str, device: str) -> float:
    """Seconds to initialise ``device`` and the framework's lazily loaded training path.

    One throwaway training step of a 4 → 4 dense model with Adam (torch: a module and
    ``optim.Adam``; TensorFlow: Keras ``fit`` for one step), synchronised. This is what
    every program pays once before its first real step (CUDA context, cuBLAS handles,
    lazy imports); the runner adds it to each point's cold start so that cold starts
    are comparable whichever point a job measures first.
    """
    import time

    start = time.perf_counter()
    if framework == "torch":
        import torch

        dev = torch.device("cuda:0" if device == "cuda" else "cpu")
        model = torch.nn.Linear(4, 4).to(dev)
        opt = torch.optim.Adam(model.parameters())
        loss = model(torch.ones(2, 4, device=dev)).square().mean()
        loss.backward()
        opt.step()
        loss.item()
    else:
        import numpy as np
        from tensorflow import keras

        model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(4)])
        model.compile(optimizer="adam", loss="mse", jit_compile=False, steps_per_execution=1)
        x = np.ones((2, 4), dtype=np.float32)
        model.fit(x, x, batch_size=2, epochs=1, verbose=0)
    return time.perf_counter() - start
