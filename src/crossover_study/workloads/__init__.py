"""The seed cases as timeable training programs, one module per framework.

Every workload takes ``(device, sizes, variant)``; a variant that does not apply to a
case, framework or device raises :class:`NotApplicable` from the constructor, before
anything is built, and the runner records ``status=not_applicable`` with the reason.
"""

from __future__ import annotations

from .. import cases
from ..spec import REPLICA_DEVICES, REPLICA_VARIANTS


class NotApplicable(Exception):
    """The variant does not apply to this case, framework or device (message: why)."""


class Unavailable(Exception):
    """What the point needs besides its device is missing on this machine (e.g. the C
    compiler torch.compile builds its kernels with); message: what and where it was
    looked for. The runner records ``status=unavailable``, which a rerun measures again."""


#: Variants that exist in one framework only; the other framework's rows are
#: ``not_applicable``, also where the device is missing (no ``unavailable`` row suggests
#: a GPU would have run them). The data-parallel ones come from spec.REPLICA_VARIANTS.
FRAMEWORK_OF_VARIANT: dict[str, str] = {
    "cuda_graph": "torch",
    "compile": "torch",
    "train_on_batch": "tensorflow",
    "custom_step": "tensorflow",
    "function": "tensorflow",
    "xla": "tensorflow",
    "loop": "tensorflow",
    "steps_per_execution": "tensorflow",
    "tf_data_repeat": "tensorflow",
    **REPLICA_VARIANTS,
    "strategy_step": "tensorflow",
}
_FRAMEWORK_NAMES = {"torch": "PyTorch", "tensorflow": "TensorFlow/Keras"}


def check_framework(variant: str, framework: str) -> None:
    """Raise NotApplicable when ``variant`` exists only in the other framework
    (:data:`FRAMEWORK_OF_VARIANT`); the message names the framework it belongs to."""
    owner = FRAMEWORK_OF_VARIANT.get(variant)
    if owner is not None and owner != framework:
        raise NotApplicable(f"{variant} is a {_FRAMEWORK_NAMES[owner]} program variant")


#: Variants that change how often the loss is read back to the host (steps between reads).
LOSS_READ_VARIANTS = {"read_loss_every_step": 1, "read_loss_every_1000": 1000}


def loss_read_every(workload, variant: str) -> int:
    """Steps between loss reads for ``variant`` of ``workload`` (a workload instance or
    class whose ``loss_read_every`` is its seed program's own interval).

    Raises NotApplicable for a program that already reads the loss every step and so
    cannot be made to read less often by a variant (Keras 3 ``fit``: see
    :data:`FIT_READS_EVERY_STEP`), and for a variant identical to the seed's program.
    """
    every = workload.loss_read_every
    if variant not in LOSS_READ_VARIANTS:
        return every
    if getattr(workload, "fit_reads_every_step", False):
        raise NotApplicable(FIT_READS_EVERY_STEP)
    target = LOSS_READ_VARIANTS[variant]
    if target == every:
        whose = "the seed's program" if getattr(workload, "seed_program", True) else "your step"
        raise NotApplicable(f"{whose} already reads the loss every {every} step(s) (= eager)")
    return target


#: Why a Keras ``fit`` program reads its loss every step, whatever a variant asks:
#: Keras 3 ``CallbackList.on_train_batch_end`` converts the step's logs to Python floats
#: (``python_utils.pythonify_logs``, one ``convert_to_numpy`` per log value), and on the
#: TensorFlow backend callbacks run synchronously (``_async_train`` is False even with
#: only the History callback; keras 3.15 ``callbacks/callback_list.py``). Counted in
#: tests/test_workloads.py.
FIT_READS_EVERY_STEP = (
    "Keras 3 fit converts its logs to Python floats after every step (callbacks run "
    "synchronously on the TensorFlow backend): it reads the loss every step, and no "
    "setting of fit reads it less often (custom_step and steps_per_execution do)"
)


def check_lstm_kernel(variant: str, device: str, has_lstm: bool) -> None:
    """Raise NotApplicable when an LSTM-kernel variant (``cudnn``, ``generic``) cannot
    apply: the case has no LSTM, or the device is not CUDA (on the CPU there is one
    kernel, the same as eager's)."""
    if variant not in ("cudnn", "generic"):
        return
    if not has_lstm:
        raise NotApplicable(f"{variant} chooses an LSTM kernel; this case has no LSTM")
    if variant == "cudnn" and device != "cuda":
        raise NotApplicable("cuDNN kernels run on CUDA devices only")
    if variant == "generic" and device != "cuda":
        raise NotApplicable("on the CPU the generic LSTM kernel is the only one (= eager)")


def check_tf32(variant: str, device: str) -> None:
    """Raise NotApplicable for the ``tf32`` variant on a device class without TF32:
    TensorFloat-32 is a tensor-core mode of NVIDIA GPUs from Ampere on (TensorFlow's
    ``enable_tensor_float_32_execution`` documentation), so ``cpu`` and ``tpu`` compute
    the eager program's fp32 (:mod:`crossover_study.precision`)."""
    if variant != "tf32" or device in ("cuda", "cuda_multi"):
        return
    raise NotApplicable(
        "TF32 is a tensor-core format of NVIDIA GPUs (Ampere and later); "
        f"the {device.upper()} computes fp32 (= eager)"
    )


def check_replica_point(variant: str, case: str, device: str) -> None:
    """Raise NotApplicable when the data-parallel ``variant`` has no point for ``case``
    (the registry's cases with ``replicas``, :mod:`crossover_study.cases`) or on ``device``
    (``REPLICA_DEVICES``), or when ``mirrored_fit`` meets a case whose seed is not Keras
    ``fit`` (:func:`check_fit_replica_case`)."""
    replica_cases = cases.with_flag("replicas")
    if case not in replica_cases:
        raise NotApplicable(
            f"replicas are measured for {', '.join(replica_cases)} (issue 5); {case}'s "
            + ("seed ran on one device" if case in cases.SEEDS else "program runs on one device")
        )
    if device not in REPLICA_DEVICES:
        raise NotApplicable(f"{variant} runs on {' or '.join(REPLICA_DEVICES)}, not {device}")
    if variant == "mirrored_fit":
        check_fit_replica_case(case)


def replica_batches(
    variant: str, case: str, device: str, batch: int, replicas: int, scaling: str | None
) -> tuple[int, int]:
    """(samples per replica, global samples) per step of a data-parallel point
    (a variant of ``spec.REPLICA_VARIANTS``): strong scaling splits ``batch`` over the
    replicas, weak scaling (and one replica) gives every replica ``batch``.

    Raises NotApplicable for a case or device without replicas
    (the registry's cases with ``replicas``, ``REPLICA_DEVICES``) or a batch strong
    scaling cannot split evenly; ValueError for fewer than one replica.
    """
    check_replica_point(variant, case, device)
    if replicas < 1:
        raise ValueError(f"{variant} needs at least 1 replica, got {replicas}")
    if scaling == "strong" and batch % replicas:
        raise NotApplicable(
            f"strong scaling splits the batch {batch} over {replicas} replicas: not divisible"
        )
    per_replica = batch // replicas if scaling == "strong" else batch
    return per_replica, per_replica * replicas


def check_replica_variant(variant: str) -> None:
    """Raise NotApplicable for a data-parallel variant (``spec.REPLICA_VARIANTS``: ``ddp``,
    ``mirrored``, ``mirrored_fit``) given to a one-device program: those run through the
    ``replication`` config section, with replicas (``frameworks.make_workload``)."""
    if variant in REPLICA_VARIANTS:
        raise NotApplicable(
            f"{variant} trains on several replicas; its points come from the replication "
            "section of the config"
        )


def check_fit_replica_case(case: str) -> None:
    """Raise NotApplicable when ``case``'s seed did not train with Keras ``fit``
    (the registry's cases with ``fit_replicas``), so ``mirrored_fit`` has no program for
    it."""
    fit_replica_cases = cases.with_flag("fit_replicas")
    if case not in fit_replica_cases:
        raise NotApplicable(
            f"mirrored_fit trains a Keras model with fit under MirroredStrategy, as "
            f"{', '.join(fit_replica_cases)}'s seed did; {case}'s seed is not a Keras fit "
            "program (the mirrored variant measures its strategy step)"
        )
