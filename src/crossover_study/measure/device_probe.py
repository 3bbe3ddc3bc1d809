"""Whether a framework sees the job's device, and its name (the device probe).

Part of the framework set-up inside a measuring job (:mod:`crossover_study.measure.frameworks`).
Every function imports its framework lazily, after
``frameworks.pin_thread_env`` has set the thread variables the framework reads at
import time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from crossover_study.core.errors import DeviceMissingError
from crossover_study.core.origin import cpu_model


@dataclass(frozen=True)
class DeviceProbe:
    """What the job saw of its device. ``reason`` says why it is unavailable."""

    available: bool
    device_name: str | None
    reason: str | None
    framework_version: str | None  # None: the framework could not be imported
    cuda_version: str | None
    visible: str  # the framework's own device list, as text


def probe(framework: str, device: str) -> DeviceProbe:
    """Whether ``device`` is visible to ``framework`` in this process, and its name.

    ``cuda_multi`` is available with at least 2 GPUs (the replicas of a point are GPUs
    0..replicas-1). ``tpu`` is available to TensorFlow when a TPU system initialises
    (:func:`tpu_strategy`); torch has no TPU backend here. An unavailable probe's
    ``reason`` says what was missing or what failed.
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


def visible_devices_text() -> str:
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


#: The TPU system of this process, connected once (see :func:`tpu_strategy`): the
#: strategy, or the reason none could be made.
_TPU: dict[str, Any] = {}


def tpu_strategy():
    """The ``tf.distribute.TPUStrategy`` of this process's TPU, connected on first call.

    Steps, each named in the error when it fails: ``TPUClusterResolver(tpu=<TPU_NAME or
    'local'>)``, ``tf.config.experimental_connect_to_cluster`` (skipped for ``local``,
    as on a TPU VM), ``tf.tpu.experimental.initialize_tpu_system``, ``TPUStrategy``.
    Raises :class:`DeviceMissingError` with that reason (cached: a failed host is not
    retried in the same process).
    """
    if "strategy" in _TPU:
        return _TPU["strategy"]
    if "reason" in _TPU:
        raise DeviceMissingError(_TPU["reason"])
    import tensorflow as tf

    name = os.environ.get("TPU_NAME") or "local"
    step = f"TPUClusterResolver(tpu={name!r})"
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name)
        if name != "local":
            step = f"tf.config.experimental_connect_to_cluster (TPU {name!r})"
            tf.config.experimental_connect_to_cluster(resolver)
        step = f"tf.tpu.experimental.initialize_tpu_system (TPU {name!r})"
        tf.tpu.experimental.initialize_tpu_system(resolver)
        step = f"tf.distribute.TPUStrategy (TPU {name!r})"
        strategy = tf.distribute.TPUStrategy(resolver)
    except Exception as exc:  # noqa: BLE001 - any failure means: no TPU here
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        _TPU["reason"] = (
            f"no TPU usable by TensorFlow {tf.__version__}: {step} failed with "
            f"{type(exc).__name__}: {_clip(first, 300)}"
        )
        raise DeviceMissingError(_TPU["reason"]) from exc
    _TPU["strategy"] = strategy
    return strategy


def _clip(text: str, limit: int) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters, marked with
    an ellipsis when cut."""
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " \u2026"


def _probe_tpu(framework: str) -> DeviceProbe:
    version, cuda = _versions(framework)
    if framework == "torch":
        why = f"torch has no TPU backend here (torch {version}; torch_xla is not used)"
        return DeviceProbe(False, None, why, version, cuda, "no TPU backend")
    try:
        strategy = tpu_strategy()
    except DeviceMissingError as exc:
        return DeviceProbe(False, None, str(exc), version, cuda, "no TPU")
    tpus = tpu_names(framework)
    name = f"TPU x{strategy.num_replicas_in_sync} ({os.environ.get('TPU_ACCELERATOR_TYPE') or os.environ.get('TPU_NAME') or 'local'})"
    return DeviceProbe(True, name, None, version, cuda, ", ".join(tpus) or "TPU")


def _probe_cuda_multi(framework: str) -> DeviceProbe:
    version, cuda = _versions(framework)
    gpus = gpu_names(framework)
    visible = ", ".join(gpus) or "no GPU"
    if len(gpus) < 2:
        why = (
            f"cuda_multi needs at least 2 GPUs; {len(gpus)} visible to {framework} "
            f"({framework} {version}, built with CUDA {cuda or 'none'}; "
            f"CUDA_VISIBLE_DEVICES={visible_devices_text()})"
        )
        return DeviceProbe(False, None, why, version, cuda, visible)
    name = gpus[0] if len(set(gpus)) == 1 else " + ".join(gpus)
    return DeviceProbe(True, f"{len(gpus)} x {name}", None, version, cuda, visible)
