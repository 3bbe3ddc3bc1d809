"""Which variant applies to which framework, device and kind of program: one table.

:data:`RULES` is the one declarative table (issue 17, step 5). Each row refuses a
variant where its scope holds: the variant is one of ``variants``, the framework one of
``frameworks``, the device one of ``devices`` (``None``: any), the program has every
trait of ``kinds`` and none of ``not_kinds`` (the traits are
:data:`crossover_study.study.program_traits.KINDS`). The first
row that refuses a point gives its reason, so the order of the rows is the order of
precedence, written down once; a point no row refuses applies.
:func:`applicability` reads the table and is the one place that decides; the program
table (:mod:`crossover_study.study.programs`), the workloads, the runner's early check and the
tests all read it.

Rows with ``workload=False`` decide whether the variant has a *program* there (what
:func:`crossover_study.study.programs.program_of` reads); rows with ``workload=True`` refuse a
way of executing a program that exists (a CUDA graph on the CPU, ``function`` of a step
that already is a ``tf.function``): the program table leaves those points their
program, and the workload refuses them when built. Some traits of a plug-in's program
(one step or Keras fit, data or none, its loss-read interval) are known only once its
builder ran; its workload asks again then.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from crossover_study.study import cases
from crossover_study.study.spec import (
    DEVICES,
    FRAMEWORK_OF_VARIANT,
    KERAS_PATHS,
    LOSS_READ_VARIANTS,
    PLUGIN_VARIANTS,
    REPLICA_DEVICES,
    REPLICA_VARIANTS,
    VARIANTS,
)


class NotApplicable(Exception):
    """The variant does not apply to this case, framework or device (message: why)."""


#: How the reasons name each framework.
FRAMEWORK_NAMES: dict[str, str] = {"torch": "PyTorch", "tensorflow": "TensorFlow/Keras"}

#: Keras fit variants that run another program than fit (``programs`` module docstring).
KERAS_PROGRAM_OF_VARIANT: dict[str, str] = {
    "train_on_batch": "keras_train_on_batch",
    "custom_step": "keras_custom_step",
    "tf_data_repeat": "keras_fit_repeat",
}

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

#: Why the seed's own program does not run on ``tpu``: TPUStrategy trains with a
#: tf.distribute step, so the TPU is compared with the CPU through ``strategy_step``.
TPU_ONLY_STRATEGY_STEP = (
    "on tpu only strategy_step runs (the step under TPUStrategy); the seed's own program "
    "({program}) is not run under TPUStrategy, so the TPU is compared with strategy_step on "
    "the CPU (OneDeviceStrategy), the same program (list strategy_step in sweep.variants)"
)


@dataclass(frozen=True)
class Rule:
    """One row of :data:`RULES`: where a variant does not apply, and why.

    The row refuses a point when every part of its scope holds (``None``: any value);
    ``reason`` is a :meth:`str.format` template of the fields of :func:`applicability`'s
    context (``variant``, ``device``, ``case`` ...). ``workload``: True for a row that
    refuses a way of executing a program that exists (the program table skips it).
    ``name`` groups rows that are one check (``framework``, ``tf32`` ...).
    """

    name: str
    reason: str
    variants: frozenset[str] | None = None
    frameworks: frozenset[str] | None = None
    devices: frozenset[str] | None = None
    kinds: frozenset[str] = frozenset()
    not_kinds: frozenset[str] = frozenset()
    workload: bool = False

    def refuses(
        self, variant: str, framework: str | None, device: str | None, kind: frozenset[str]
    ) -> bool:
        """Whether the row refuses the point; a ``None`` framework or device is unknown,
        and a row that looks at it does not refuse."""
        for value, scope in ((variant, self.variants), (framework, self.frameworks)):
            if scope is not None and value not in scope:
                return False
        if self.devices is not None and device not in self.devices:
            return False
        return self.kinds <= kind and not self.not_kinds & kind


def _set(*values: str) -> frozenset[str]:
    return frozenset(values)


def _but(universe: Iterable[str], *values: str) -> frozenset[str]:
    return frozenset(universe) - set(values)


#: Why ``malloc_env`` is measured on the CPU only: glibc's thresholds govern the host's
#: heap, where a CPU step's tensors live; an accelerator's live in its own allocator.
MALLOC_ENV_CPU_ONLY = (
    "malloc_env sets glibc's heap thresholds, which govern a CPU step's tensors; the "
    "tensors on {DEVICE} live in its own allocator"
)

_TF_ONLY = frozenset(v for v, f in FRAMEWORK_OF_VARIANT.items() if f == "tensorflow")
_TORCH_ONLY = frozenset(v for v, f in FRAMEWORK_OF_VARIANT.items() if f == "torch")
_REPLICA = frozenset(REPLICA_VARIANTS)
_CUDA_MULTI_ONLY = (
    "cuda_multi measures the replicated points ({replica_variants}) of the "
    "replication section only; the one-GPU program is the cuda class's"
)

#: The table, in order of precedence (the first row that refuses a point gives the
#: reason). Program rows first: which variant has a program where, as the program table
#: and the runner's early check (before the device is probed) read them; then the rows
#: of the workloads, which refuse a way of executing a program that exists.
RULES: tuple[Rule, ...] = (
    Rule(
        "replicated",
        "{variant} is not a replica variant ({replica_owners})",
        variants=_but(VARIANTS, *REPLICA_VARIANTS),
        kinds=_set("replicated"),
    ),
    Rule(
        "framework",
        "{variant} is a TensorFlow/Keras program variant",
        variants=_TF_ONLY,
        frameworks=_set("torch"),
    ),
    Rule(
        "framework",
        "{variant} is a PyTorch program variant",
        variants=_TORCH_ONLY,
        frameworks=_set("tensorflow"),
    ),
    Rule(
        "plugin_framework", "{case} is a {case_frameworks} plug-in", kinds=_set("other_framework")
    ),
    Rule(
        "tf32",
        "TF32 is a tensor-core format of NVIDIA GPUs (Ampere and later); "
        "the {DEVICE} computes fp32 (= eager)",
        variants=_set("tf32"),
        devices=_but(DEVICES, "cuda", "cuda_multi"),
        workload=True,
    ),
    Rule(
        "one_device",
        "{variant} trains on several replicas; its points come from the replication "
        "section of the config",
        variants=_REPLICA,
        kinds=_set("one_device"),
        workload=True,
    ),
    Rule(
        "one_device",
        "strategy_step is the tf.distribute step (tf_strategy.StrategyWorkload, chosen "
        "by frameworks.make_workload), not a variant of the one-device program",
        variants=_set("strategy_step"),
        kinds=_set("one_device"),
        not_kinds=_set("plugin"),
        workload=True,
    ),
    Rule(
        "replicas",
        "replicas are measured for {replica_cases} (issue 5); {case}'s {one_device_text}",
        variants=_REPLICA,
        not_kinds=_set("replicas"),
    ),
    Rule(
        "replicas",
        "{variant} runs on {replica_devices}, not {device}",
        variants=_REPLICA,
        devices=_but(DEVICES, *REPLICA_DEVICES),
    ),
    Rule(
        "replicas",
        "mirrored_fit trains a Keras model with fit under MirroredStrategy, as "
        "{fit_replica_cases}'s seed did; {case}'s seed is not a Keras fit program (the "
        "mirrored variant measures its strategy step)",
        variants=_set("mirrored_fit"),
        not_kinds=_set("fit_replicas"),
    ),
    Rule(
        "cuda_multi",
        _CUDA_MULTI_ONLY,
        variants=_but(VARIANTS, *REPLICA_VARIANTS),
        devices=_set("cuda_multi"),
    ),
    Rule(
        "tpu",
        "torch has no TPU backend here (torch_xla is not used)",
        frameworks=_set("torch"),
        devices=_set("tpu"),
        not_kinds=_set("plugin"),
    ),
    Rule(
        "tpu",
        "a plug-in's step is not run under TPUStrategy here (only the seeds' "
        "strategy_step is); the TPU rows of a case of your own are not measured",
        devices=_set("tpu"),
        kinds=_set("plugin"),
    ),
    Rule(
        "plugin_variants",
        "{variant} is written for the seeds' own programs; from a plug-in's step the "
        "library derives {plugin_variants}",
        variants=_but(VARIANTS, *PLUGIN_VARIANTS),
        kinds=_set("plugin"),
    ),
    Rule(
        "keras_paths",
        "{variant} applies to Keras fit programs; this one has no fit",
        variants=frozenset(KERAS_PATHS),
        not_kinds=_set("keras_fit", "plugin"),
    ),
    Rule(
        "tpu",
        TPU_ONLY_STRATEGY_STEP,
        variants=_but(VARIANTS, "strategy_step"),
        frameworks=_set("tensorflow"),
        devices=_set("tpu"),
    ),
    # -- the workloads' rows: the program exists, this way of executing it does not --
    Rule(
        "malloc_env",
        MALLOC_ENV_CPU_ONLY,
        variants=_set("malloc_env"),
        devices=_but(DEVICES, "cpu"),
        workload=True,
    ),
    Rule(
        "compile",
        "torch.compile (AOTAutograd) does not support the double backward that "
        "dV/dk with create_graph=True needs",
        variants=_set("compile"),
        kinds=_set("double_backward"),
        workload=True,
    ),
    Rule(
        "cuda_graph",
        "a CUDA graph captures CUDA kernels; the CPU has none",
        variants=_set("cuda_graph"),
        devices=_but(DEVICES, "cuda"),
        workload=True,
    ),
    Rule(
        "lstm_kernel",
        "{variant} chooses an LSTM kernel; this case has no LSTM",
        variants=_set("cudnn", "generic"),
        not_kinds=_set("lstm"),
        workload=True,
    ),
    Rule(
        "lstm_kernel",
        "cuDNN kernels run on CUDA devices only",
        variants=_set("cudnn"),
        devices=_but(DEVICES, "cuda"),
        workload=True,
    ),
    Rule(
        "lstm_kernel",
        "on the CPU the generic LSTM kernel is the only one (= eager)",
        variants=_set("generic"),
        devices=_but(DEVICES, "cuda"),
        workload=True,
    ),
    Rule(
        "function",
        "the {whose_step} already is a tf.function (= eager)",
        variants=_set("function"),
        kinds=_set("function_step"),
        workload=True,
    ),
    Rule(
        "loss_read",
        FIT_READS_EVERY_STEP,
        variants=frozenset(LOSS_READ_VARIANTS),
        kinds=_set("fit_reads_every_step"),
        workload=True,
    ),
    *(
        Rule(
            "loss_read",
            "{whose} already reads the loss every {every} step(s) (= eager)",
            variants=_set(variant),
            kinds=_set(f"loss_every_{every}"),
            workload=True,
        )
        for variant, every in LOSS_READ_VARIANTS.items()
    ),
    Rule(
        "keras_fit",
        "Keras fit on NumPy arrays already copies every batch",
        variants=_set("copy_data_each_step"),
        frameworks=_set("tensorflow"),
        kinds=_set("keras_fit"),
        not_kinds=_set("plugin"),
        workload=True,
    ),
    Rule(
        "keras_fit",
        "Keras fit already runs its step as a tf.function (= eager)",
        variants=_set("function"),
        frameworks=_set("tensorflow"),
        kinds=_set("keras_fit"),
        not_kinds=_set("plugin"),
        workload=True,
    ),
    Rule(
        "keras_fit",
        "for Keras fit, many steps per program is steps_per_execution",
        variants=_set("loop"),
        frameworks=_set("tensorflow"),
        kinds=_set("keras_fit"),
        not_kinds=_set("plugin"),
        workload=True,
    ),
    Rule(
        "keras_fit",
        "fit feeds its batches from the host arrays x and y every step already (it builds "
        "its input pipeline from them); there is no placed copy to compare with",
        variants=_set("copy_data_each_step"),
        kinds=_set("keras_fit", "plugin"),
        workload=True,
    ),
    Rule(
        "keras_fit",
        "fit already runs its train step as a tf.function (= eager)",
        variants=_set("function"),
        kinds=_set("keras_fit", "plugin"),
        workload=True,
    ),
    Rule(
        "keras_fit",
        "fit has no step function of the plug-in's to loop over; steps_per_execution runs "
        "many steps per train_function call",
        variants=_set("loop"),
        kinds=_set("keras_fit", "plugin"),
        workload=True,
    ),
    Rule(
        "keras_fit",
        "steps_per_execution is a setting of Keras fit; this step has no fit",
        variants=_set("steps_per_execution"),
        kinds=_set("step", "plugin"),
        workload=True,
    ),
    Rule(
        "no_data",
        "the step makes its own batch ({step_class}.data is empty): no data to copy",
        variants=_set("copy_data_each_step"),
        kinds=_set("no_data"),
        workload=True,
    ),
)


class _Context(dict):
    """The fields a reason may name, computed when a reason names them."""

    def __init__(self, variant, framework, device, kind, case):
        super().__init__(variant=variant, framework=framework, device=device)
        self.kind, self.case = kind, case

    def __missing__(self, key: str) -> str:
        variant, device, kind, case = self["variant"], self["device"], self.kind, self.case
        plugin = "plugin" in kind
        if key == "DEVICE":
            return str(device).upper()
        if key == "whose":
            return "your step" if plugin else "the seed's program"
        if key == "whose_step":
            return "plug-in's step" if plugin else "seed's step"
        if key == "every":
            return str(LOSS_READ_VARIANTS[variant])
        if key == "step_class":
            return "TorchStep" if self["framework"] == "torch" else "TFStep"
        if key == "replica_owners":
            return ", ".join(f"{v} for {f}" for v, f in REPLICA_VARIANTS.items())
        if key == "replica_variants":
            return ", ".join(REPLICA_VARIANTS)
        if key == "replica_devices":
            return " or ".join(REPLICA_DEVICES)
        if key == "plugin_variants":
            return ", ".join(PLUGIN_VARIANTS)
        if key == "replica_cases":
            return ", ".join(cases.with_flag("replicas"))
        if key == "fit_replica_cases":
            return ", ".join(cases.with_flag("fit_replicas"))
        if key == "program":
            if "keras_fit" in kind:
                return KERAS_PROGRAM_OF_VARIANT.get(variant, "keras_fit")
            return "tf_step"
        if case is None:
            raise ValueError(f"the reason names {{{key}}}: give applicability the case")
        if key == "case":
            return case
        if key == "case_frameworks":
            return ", ".join(cases.get(case).frameworks)
        if key == "one_device_text":
            seed = case in cases.SEEDS
            return "seed ran on one device" if seed else "program runs on one device"
        raise KeyError(key)


def applicability(
    variant: str,
    framework: str | None,
    device: str | None,
    kind: Iterable[str] = (),
    *,
    case: str | None = None,
    programs_only: bool = False,
    names: Iterable[str] | None = None,
) -> tuple[bool, str | None]:
    """Whether ``variant`` applies in ``framework`` on ``device`` (a device class of
    ``spec.DEVICES``) to a program of ``kind`` (traits of :data:`~crossover_study.study.program_traits.KINDS`), and if not why:
    ``(True, None)`` or ``(False, reason)``, the reason of the first row of
    :data:`RULES` that refuses it.

    ``case`` fills the reasons that name it (required where one does: ValueError
    otherwise). ``programs_only``: read only the rows that decide whether a program
    exists (the program table's). ``names``: read only the rows of these checks (the
    :attr:`Rule.name`\\ s). A ``None`` framework or device is unknown: rows that look at
    it do not refuse.
    """
    kind = frozenset(kind)
    wanted = None if names is None else frozenset(names)
    for rule in RULES:
        if programs_only and rule.workload:
            continue
        if wanted is not None and rule.name not in wanted:
            continue
        if rule.refuses(variant, framework, device, kind):
            return False, rule.reason.format_map(_Context(variant, framework, device, kind, case))
    return True, None


def require(
    variant: str,
    framework: str | None,
    device: str | None,
    kind: Iterable[str] = (),
    **options,
) -> None:
    """Raise :class:`NotApplicable` with :func:`applicability`'s reason where
    ``variant`` does not apply (same arguments and keywords); return None where it does."""
    applies, why = applicability(variant, framework, device, kind, **options)
    if not applies:
        raise NotApplicable(why)
