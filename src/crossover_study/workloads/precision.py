"""Float precision of the measured programs: fp32 pinned in every measuring process,
TF32 for the ``tf32`` variant's points only, and the precision in effect read back from
the framework for each row.

Why pin: TensorFlow allows TensorFloat-32 for float32 matrix multiplications and
convolutions by default (``tf.config.experimental.enable_tensor_float_32_execution``:
"TensorFloat-32 is enabled by default"), and torch lets cuDNN use it by default
(``torch.backends.cudnn.allow_tf32`` defaults to True; with torch >= 2.9 the read-back
``torch.backends.cudnn.conv.fp32_precision`` and ``.rnn.fp32_precision`` say ``tf32``),
while torch's cuBLAS matmuls default to fp32. Unpinned, a TensorFlow GPU row and a torch
GPU row would not compute the same arithmetic. TF32 (8 exponent bits, 10 mantissa bits)
is a tensor-core mode of NVIDIA GPUs from Ampere (compute capability 8.0) on; other
hardware computes float32 whatever the flags say (TensorFlow's documentation of
``enable_tensor_float_32_execution``; PyTorch notes "TensorFloat-32 (TF32) on Ampere (and
later) devices").

torch's switches: the legacy booleans ``torch.backends.cuda.matmul.allow_tf32`` and
``torch.backends.cudnn.allow_tf32`` (every torch since 1.7) and, since torch 2.9, the
per-backend, per-operation ``fp32_precision`` strings (``ieee`` = fp32, ``tf32``,
``bf16``, ``none`` = not set, which is fp32 unless a parent level is set; a setter
propagates to the levels below). This module sets only the legacy booleans for CUDA and
cuDNN: torch 2.13 refuses to read a legacy flag after the new API set it ("you have used
mix of the legacy and new APIs"), and the legacy setters keep both readable. The CPU's
oneDNN (mkldnn) matmul, convolution and RNN are pinned with the new API where it exists
(``torch.backends.mkldnn.<op>.fp32_precision = "ieee"``; ``bf16`` would let oneDNN
compute float32 ops in bfloat16 on CPUs that have it). Tested on torch 2.13 (the lock);
the GPU reference machine runs torch 2.11, which has the same API (added in 2.9).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

#: Values of the ``precision`` column, most precise first: ``fp32`` (IEEE float32, 23
#: mantissa bits), ``tf32`` (TensorFloat-32, 10 mantissa bits), ``bf16`` (bfloat16, 7),
#: ``fp16`` (IEEE half, 10 mantissa bits, 5 exponent bits). The study measures fp32 and
#: tf32; bf16 and fp16 are what a read-back may find (a oneDNN or Keras setting).
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16")
#: The precision every measuring process pins (:func:`pin_fp32`); part of a job's
#: settings fingerprint (``runner.GroupSpec.settings``), so that a journaled row measured
#: before precision was pinned and recorded is measured again rather than reused.
PINNED = "fp32"
#: Device classes whose hardware has TF32 (NVIDIA GPUs; Ampere and later).
TF32_DEVICES: tuple[str, ...] = ("cuda", "cuda_multi")
#: The variant that turns TF32 on for its point (spec.VARIANTS).
TF32_VARIANT = "tf32"

#: torch >= 2.9 ``fp32_precision`` settings read back, as (backend, operation):
#: cuBLAS matmuls and cuDNN convolutions and RNNs (GPU), oneDNN's (CPU).
TORCH_GPU_OPS: tuple[tuple[str, str], ...] = (
    ("cuda", "matmul"),
    ("cudnn", "conv"),
    ("cudnn", "rnn"),
)
TORCH_CPU_OPS: tuple[tuple[str, str], ...] = (
    ("mkldnn", "matmul"),
    ("mkldnn", "conv"),
    ("mkldnn", "rnn"),
)
#: The legacy torch booleans, in read-back order (GPU only: cuBLAS, cuDNN).
TORCH_LEGACY_FLAGS: tuple[str, ...] = (
    "torch.backends.cuda.matmul.allow_tf32",
    "torch.backends.cudnn.allow_tf32",
)
#: torch ``fp32_precision`` values and the precision they let an op use.
_TORCH_VALUES = {"ieee": "fp32", "none": "fp32", "tf32": "tf32", "bf16": "bf16"}
#: Keras dtype policies (``keras.mixed_precision``) and the precision they compute in.
_KERAS_POLICIES = {"mixed_float16": "fp16", "mixed_bfloat16": "bf16", "float16": "fp16"}


def _check_framework(framework: str) -> None:
    if framework not in ("torch", "tensorflow"):
        raise ValueError(f"unknown framework {framework!r}: expected torch or tensorflow")


def has_fp32_precision_api() -> bool:
    """True when this torch has the ``fp32_precision`` settings (torch >= 2.9)."""
    import torch

    return hasattr(torch.backends, "fp32_precision")


def _torch_op(torch, backend: str, op: str):
    return getattr(getattr(torch.backends, backend), op)


def _set_torch_tf32(enabled: bool) -> None:
    """Legacy setters for cuBLAS matmuls and cuDNN (convolutions and RNNs)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def pin_fp32(framework: str) -> None:
    """Make float32 ops compute in float32 in this process (call once, after the import,
    before any point): TF32 off in torch (cuBLAS matmuls and cuDNN; the legacy setters)
    and oneDNN's matmul, convolution and RNN at ``ieee`` where torch has
    ``fp32_precision`` (torch >= 2.9); in TensorFlow
    ``tf.config.experimental.enable_tensor_float_32_execution(False)`` (which also gives
    XLA's matmuls and convolutions the HIGHEST precision config). Raises ValueError for
    another framework."""
    _check_framework(framework)
    if framework == "torch":
        import torch

        _set_torch_tf32(False)
        if has_fp32_precision_api():
            for backend, op in TORCH_CPU_OPS:
                _torch_op(torch, backend, op).fp32_precision = "ieee"
        return
    import tensorflow as tf

    tf.config.experimental.enable_tensor_float_32_execution(False)


def _flag_text(read) -> str:
    """``read()`` as text, or why it failed (torch refuses some mixes of its APIs)."""
    try:
        return str(read())
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"unreadable ({first[:80]})"


def read_settings(framework: str) -> dict[str, str]:
    """The precision settings of ``framework`` in this process, read back from the
    framework, as ``{setting's Python name: value as text}``.

    torch: the legacy booleans (:data:`TORCH_LEGACY_FLAGS`) and, on torch >= 2.9, the
    ``fp32_precision`` of :data:`TORCH_GPU_OPS` and :data:`TORCH_CPU_OPS`.
    TensorFlow: ``tf.config.experimental.tensor_float_32_execution_enabled()`` and the
    Keras global dtype policy (``keras.mixed_precision.global_policy().name``).
    A setting torch refuses to read says ``unreadable (...)``. Raises ValueError for
    another framework.
    """
    _check_framework(framework)
    if framework == "torch":
        import torch

        out = {
            "torch.backends.cuda.matmul.allow_tf32": _flag_text(
                lambda: torch.backends.cuda.matmul.allow_tf32
            ),
            "torch.backends.cudnn.allow_tf32": _flag_text(lambda: torch.backends.cudnn.allow_tf32),
        }
        if has_fp32_precision_api():
            for backend, op in TORCH_GPU_OPS + TORCH_CPU_OPS:
                out[f"torch.backends.{backend}.{op}.fp32_precision"] = _flag_text(
                    lambda b=backend, o=op: _torch_op(torch, b, o).fp32_precision
                )
        return out
    import tensorflow as tf
    from tensorflow import keras

    return {
        "tf.config.experimental.tensor_float_32_execution_enabled()": str(
            tf.config.experimental.tensor_float_32_execution_enabled()
        ),
        "keras.mixed_precision.global_policy()": keras.mixed_precision.global_policy().name,
    }


def settings_text(settings: dict[str, str]) -> str:
    """``settings`` (:func:`read_settings`) as one line: ``name=value, name=value``."""
    return ", ".join(f"{name}={value}" for name, value in settings.items())


def _lowest(precisions) -> str:
    """The least precise of ``precisions`` (order of :data:`PRECISIONS`; fp32 if none)."""
    return max(precisions, key=PRECISIONS.index, default="fp32")


def _torch_value(settings: dict[str, str], name: str) -> str:
    value = settings.get(name)
    if value is None:
        return "fp32"
    if value not in _TORCH_VALUES:
        raise ValueError(f"cannot tell the precision from {name}={value}")
    return _TORCH_VALUES[value]


def precision_in_effect(framework: str, device: str, settings: dict[str, str] | None = None) -> str:
    """The precision float32 ops of a point on ``device`` compute in, from the settings
    read back from ``framework`` (``settings``: :func:`read_settings`' dict; read now
    when None). One of :data:`PRECISIONS`: the least precise one any of the device's
    float32 matmuls, convolutions or RNNs is allowed to use.

    - ``cpu``: ``fp32``. TF32 is a tensor-core mode of NVIDIA GPUs (Ampere and later;
      TensorFlow's ``enable_tensor_float_32_execution`` documentation), so neither
      framework's TF32 flag changes CPU arithmetic; only torch's oneDNN
      ``fp32_precision`` (matmul, conv, rnn; torch >= 2.9) can make it ``bf16`` or
      ``tf32``, and then the row says so.
    - ``cuda``, ``cuda_multi``: torch ``tf32`` when cuBLAS matmuls or cuDNN convolutions
      or RNNs may use TF32 (``fp32_precision`` on torch >= 2.9, else the legacy
      booleans); TensorFlow ``tf32`` when ``tensor_float_32_execution_enabled()``. The
      flags permit TF32; a GPU older than Ampere (see ``device_name``) has no TF32 and
      computes fp32 anyway.
    - ``tpu`` (TensorFlow): ``fp32`` with TF32 off, which gives XLA the HIGHEST
      precision config; with TF32 on XLA keeps its DEFAULT config, which on TPUs
      multiplies float32 in one bfloat16 pass: ``bf16``.

    A Keras mixed-precision global policy (``mixed_float16``, ``mixed_bfloat16``) makes
    TensorFlow rows ``fp16`` / ``bf16`` on every device. Raises ValueError for an unknown
    framework or device, or a torch setting that is unreadable or has an unknown value.
    """
    _check_framework(framework)
    if device not in ("cpu", "tpu", *TF32_DEVICES):
        raise ValueError(f"unknown device class {device!r}")
    if settings is None:
        settings = read_settings(framework)
    if framework == "tensorflow":
        policy = settings.get("keras.mixed_precision.global_policy()", "float32")
        if policy in _KERAS_POLICIES:
            return _KERAS_POLICIES[policy]
        tf32 = settings.get("tf.config.experimental.tensor_float_32_execution_enabled()")
        if tf32 not in ("True", "False"):
            raise ValueError(f"cannot tell the precision from TensorFlow's TF32 flag {tf32!r}")
        if tf32 == "False" or device == "cpu":
            return "fp32"
        return "tf32" if device in TF32_DEVICES else "bf16"
    if device == "cpu":
        names = [f"torch.backends.{b}.{o}.fp32_precision" for b, o in TORCH_CPU_OPS]
        return _lowest(_torch_value(settings, n) for n in names)
    if device == "tpu":
        return "fp32"  # torch has no TPU backend here: nothing runs on one
    names = [f"torch.backends.{b}.{o}.fp32_precision" for b, o in TORCH_GPU_OPS]
    if all(n in settings for n in names):
        return _lowest(_torch_value(settings, n) for n in names)
    legacy = [settings.get(n) for n in TORCH_LEGACY_FLAGS]
    if any(v not in ("True", "False") for v in legacy):
        raise ValueError(f"cannot tell the precision from {settings_text(settings)}")
    return "tf32" if "True" in legacy else "fp32"


def row_columns(framework: str, device: str) -> dict[str, str | None]:
    """The timings table's precision columns for a point that ran now in this process:
    ``precision`` (:func:`precision_in_effect`) and ``precision_settings`` (the settings
    it was derived from, :func:`settings_text`). A precision the settings do not tell
    (an unreadable or unknown value) is left empty, never guessed, and the measured row
    is kept: ``precision_settings`` shows why."""
    settings = read_settings(framework)
    try:
        in_effect = precision_in_effect(framework, device, settings)
    except ValueError:
        in_effect = None
    return {"precision": in_effect, "precision_settings": settings_text(settings)}


@contextlib.contextmanager
def tf32_enabled(framework: str) -> Iterator[None]:
    """Allow TF32 inside the block and restore the settings found on entry afterwards,
    also when the block raises (the points of a job share one process).

    torch: ``torch.backends.cuda.matmul.allow_tf32`` and ``torch.backends.cudnn.allow_tf32``
    True (cuBLAS matmuls; cuDNN convolutions and RNNs), restored to the values read on
    entry. Where torch refuses to read those (a state the ``fp32_precision`` API set,
    torch >= 2.9), the same through that API: :data:`TORCH_GPU_OPS` at ``tf32``, then
    their values on entry. TensorFlow: ``enable_tensor_float_32_execution(True)``, then
    the value of ``tensor_float_32_execution_enabled()`` on entry. Raises ValueError for
    another framework.
    """
    _check_framework(framework)
    if framework == "tensorflow":
        import tensorflow as tf

        before = tf.config.experimental.tensor_float_32_execution_enabled()
        tf.config.experimental.enable_tensor_float_32_execution(True)
        try:
            yield
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(before)
        return
    import torch

    try:
        legacy = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    except RuntimeError:  # "mix of the legacy and new APIs": keep to the new one
        legacy = None
    if legacy is not None:
        _set_torch_tf32(True)
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32 = legacy[0]
            torch.backends.cudnn.allow_tf32 = legacy[1]
        return
    ops = [_torch_op(torch, backend, op) for backend, op in TORCH_GPU_OPS]
    values = [o.fp32_precision for o in ops]
    for o in ops:
        o.fp32_precision = "tf32"
    try:
        yield
    finally:
        for o, value in zip(ops, values, strict=True):
            o.fp32_precision = value


def point_precision(framework: str, variant: str):
    """The context a point of ``variant`` runs in: :func:`tf32_enabled` for the ``tf32``
    variant, else nothing changes (the process's pinned fp32)."""
    if variant == TF32_VARIANT:
        return tf32_enabled(framework)
    return contextlib.nullcontext()
