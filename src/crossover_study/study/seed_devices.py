"""The accelerators each seed's user ran it on, and what they saw there
(``docs/seeds/``): the study predicts each on its device card by default and the seed's
answer says whether the prediction agrees (``crossover_study.answers.predicted``). The
users' numbers are checks only: no card value comes from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class OwnDevice:
    """An accelerator the seed's user (or an answer to their question) ran the seed's
    program on, and what they saw there: the device card it is predicted on (``card``),
    the device in words (``device``), ``saw`` (``slower``, ``faster`` or ``no faster``:
    the accelerator against the CPU, or for replicas against one device), their numbers
    in words (``measured``, from ``docs/seeds/``), the ``framework`` they ran (``torch``
    or ``tensorflow``), the sizes they measured where not the
    seed's (``sizes``, the other axes at the seed's) and ``replicas`` (devices training
    one batch together under data parallelism; 1 for one device). The study predicts
    each own device by default and the seed's answer says whether the prediction agrees
    with what its user saw. Their numbers are checks only: no card value comes from
    them."""

    card: str
    device: str
    saw: str
    measured: str
    framework: str
    sizes: Mapping[str, int] = field(default_factory=dict)
    replicas: int = 1


#: Each seed's own accelerators (``docs/seeds/``), by case.
SEED_DEVICES: dict[str, tuple[OwnDevice, ...]] = {
    "s000-hjb": (
        OwnDevice(
            "t4",
            "Colab's GPU (a T4 or a K80 in the TensorFlow 2 years)",
            "slower",
            "CPU 1 102 it/s against the GPU's 461 it/s, the CPU 2.4× faster",
            "tensorflow",
        ),
        OwnDevice(
            "k80",
            "Colab's GPU (a T4 or a K80 in the TensorFlow 2 years)",
            "slower",
            "CPU 1 102 it/s against the GPU's 461 it/s, the CPU 2.4× faster",
            "tensorflow",
        ),
    ),
    "s001-mlp": (
        OwnDevice(
            "k80",
            "Colab's GPU in 2018 (a K80, torch 0.4 with CUDA 8)",
            "slower",
            "the GPU about 16 s against the CPU's 13 s, the CPU 1.2× faster",
            "torch",
        ),
        OwnDevice(
            "t4",
            "Colab's GPU since 2019 (a T4, where the seed's notebook runs today)",
            "slower",
            "on the K80 of its time, the GPU about 16 s against the CPU's 13 s",
            "torch",
        ),
        OwnDevice(
            "gtx-1080",
            "the answer's GTX 1080",
            "faster",
            "the loop 3.5 s on the GTX 1080 against 4.0 s on its very good CPU, 1.15× faster",
            "torch",
        ),
        OwnDevice(
            "gtx-1080",
            "the answer's GTX 1080",
            "faster",
            "3.5 s on the GTX 1080 against 85 s on its CPU, 24× faster",
            "torch",
            sizes={"d_in": 5000, "hidden": 5000},
        ),
    ),
    "s002-iris": (
        OwnDevice(
            "tpu-v2-8",
            "Colab's TPU (a v2-8)",
            "slower",
            "about 30 s on the TPU against 1.3 s on the CPU for 20 epochs (6 s with "
            "the data repeated in one epoch)",
            "tensorflow",
        ),
    ),
    "s004-lstm": (
        OwnDevice(
            "t4",
            "two GPUs of one machine (the seed names no model: priced as T4s)",
            "no faster",
            "each batch about as long on two GPUs under MirroredStrategy as on one, "
            "each GPU about 40 % busy",
            "tensorflow",
            replicas=2,
        ),
    ),
}
