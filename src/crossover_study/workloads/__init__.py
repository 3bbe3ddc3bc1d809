"""The seed cases as timeable training programs, one module per framework.

Every workload takes ``(device, sizes, variant)``; a variant that does not apply to a
case, framework or device raises :class:`NotApplicable` from the constructor, before
anything is built, and the runner records ``status=not_applicable`` with the reason.
Which variant applies where is one table, :mod:`crossover_study.study.applicability`; the
workloads ask it with the traits of their program (``program_traits.KINDS``).
"""

from __future__ import annotations

from crossover_study.study.applicability import NotApplicable, require
from crossover_study.study.program_traits import case_kind
from crossover_study.study.programs import not_applicable_reason
from crossover_study.study.spec import LOSS_READ_VARIANTS, REPLICA_VARIANTS, PointSpec

__all__ = [
    "Unavailable",
    "check_framework",
    "check_tf32",
    "framework_mismatch",
    "loss_read_every",
    "replica_batches",
]


class Unavailable(Exception):
    """What the point needs besides its device is missing on this machine (e.g. the C
    compiler torch.compile builds its kernels with); message: what and where it was
    looked for. The runner records ``status=unavailable``, which a rerun measures again."""


def check_framework(variant: str, framework: str) -> None:
    """Raise NotApplicable when ``variant`` exists only in the other framework
    (the ``framework`` rows of ``applicability.RULES``, from
    :data:`FRAMEWORK_OF_VARIANT`); the message names the framework it belongs to."""
    require(variant, framework, None, names=("framework",))


def check_tf32(variant: str, device: str) -> None:
    """Raise NotApplicable for the ``tf32`` variant on a device class without TF32 (the
    ``tf32`` row of ``applicability.RULES``): TensorFloat-32 is a tensor-core mode of
    NVIDIA GPUs from Ampere on (TensorFlow's ``enable_tensor_float_32_execution``
    documentation), so ``cpu`` and ``tpu`` compute the eager program's fp32
    (:mod:`crossover_study.workloads.precision`)."""
    require(variant, None, device, names=("tf32",))


#: Why an ``unsynced`` point on the CPU is not measured: it would time the same work as
#: the synced one. PyTorch's and TensorFlow's CPU ops run synchronously (TensorFlow's
#: eager async mode is off by default), so a call returns after its work; the anti-pattern
#: of CASES.md P3 (a clock read while the device still works) exists on accelerators only.
UNSYNCED_ON_CPU = (
    "on the CPU a step's ops have finished when its call returns: a clock read without a "
    "device sync times the same work as the synced point (the unsynced anti-pattern is "
    "measured on accelerators)"
)


def framework_mismatch(point: PointSpec) -> str | None:
    """Why ``point``'s variant does not exist in its framework, or for ``tf32`` on its
    device class (TF32 is a GPU mode), or on a TensorFlow ``tpu`` point why its variant
    has no program there (only ``strategy_step`` runs under TPUStrategy:
    ``programs.program_of``), or for an ``unsynced`` point on the CPU
    (:data:`UNSYNCED_ON_CPU`); None otherwise. Decided before the device is probed, so
    such a row is ``not_applicable`` also where the device is missing (never
    ``unavailable``, which would suggest the device would have run it)."""
    if point.timing == "unsynced" and point.device == "cpu":
        return UNSYNCED_ON_CPU
    try:
        check_framework(point.variant, point.framework)
        check_tf32(point.variant, point.device)
    except NotApplicable as why:
        return str(why)
    if point.device == "tpu" and point.framework == "tensorflow":
        return not_applicable_reason(point.case, point.framework, point.device, point.variant)
    return None


def loss_read_every(workload, variant: str) -> int:
    """Steps between loss reads for ``variant`` of ``workload`` (a workload instance or
    class, or a plug-in's step, whose ``loss_read_every`` is its own program's
    interval): the interval of a loss-read variant (:data:`LOSS_READ_VARIANTS`), else
    the program's own. Whether the variant applies (not to Keras 3 ``fit``, which reads
    every step, nor where it equals the program's own interval) is the table's
    (``applicability.RULES``, ``loss_read`` rows), asked by the workload first."""
    return LOSS_READ_VARIANTS.get(variant, workload.loss_read_every)


def replica_batches(
    variant: str, case: str, device: str, batch: int, replicas: int, scaling: str | None
) -> tuple[int, int]:
    """(samples per replica, global samples) per step of a data-parallel point
    (a variant of ``spec.REPLICA_VARIANTS``): strong scaling splits ``batch`` over the
    replicas, weak scaling (and one replica) gives every replica ``batch``.

    Raises NotApplicable where the variant does not apply to ``case`` on ``device``
    (``applicability.RULES``: a case without replicas, a device not in
    ``REPLICA_DEVICES``, ``mirrored_fit`` of a case whose seed is not Keras fit) or for a
    batch strong scaling cannot split evenly; ValueError for fewer than one replica.
    """
    require(variant, REPLICA_VARIANTS[variant], device, case_kind(case), case=case)
    if replicas < 1:
        raise ValueError(f"{variant} needs at least 1 replica, got {replicas}")
    if scaling == "strong" and batch % replicas:
        raise NotApplicable(
            f"strong scaling splits the batch {batch} over {replicas} replicas: not divisible"
        )
    per_replica = batch // replicas if scaling == "strong" else batch
    return per_replica, per_replica * replicas
