"""Which reduced precisions this CPU computes natively, read from its flags.

bfloat16 and float16 matrix products run natively only on x86 CPUs with the matching
instructions: AVX512-BF16 or AMX-BF16 for bfloat16, AVX512-FP16 or AMX-FP16 for float16
(Intel's ISA extensions reference; oneDNN's "Data types" page: on other CPUs oneDNN
converts the operands and computes in float32); on Arm, the ``bf16`` and ``fphp``/
``asimdhp`` features. Elsewhere PyTorch's and TensorFlow's CPU kernels convert each
operand and compute in float32 (emulation), so a bf16 step can run many times slower
than the same step in fp32 (a 2-core AMD EPYC with AVX2 only, 2026-12-07: issue 62's
1.96 s per step at hidden 2048 against tens of ms in fp32). Read from ``/proc/cpuinfo``
(Linux); elsewhere nothing is known.
"""

from __future__ import annotations

import functools

#: The flags that give each precision native products, by precision (``precision``'s
#: values, :data:`crossover_study.workloads.precision.PRECISIONS`).
NATIVE_FLAGS = {
    "bf16": ("avx512_bf16", "amx_bf16", "bf16"),
    "fp16": ("avx512_fp16", "amx_fp16", "fphp", "asimdhp"),
}
#: torch/TensorFlow dtype names by precision.
DTYPE_PRECISION = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32"}


@functools.lru_cache(maxsize=1)
def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str] | None:
    """The first CPU's flags (``flags`` on x86, ``Features`` on Arm) in ``path``; None
    where the file cannot be read or has neither line."""
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        return None
    return None


def emulated(precision: str | None, flags: frozenset[str] | None = None) -> bool | None:
    """Whether this CPU emulates ``precision``'s products (True), computes them natively
    (False), or it is not known (None: no flags, or a precision other than bf16/fp16).
    ``flags`` default: :func:`cpu_flags`."""
    native = NATIVE_FLAGS.get(precision or "")
    flags = cpu_flags() if flags is None else flags
    if native is None or flags is None:
        return None
    return not any(flag in flags for flag in native)
