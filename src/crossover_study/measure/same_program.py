"""Whether a plug-in's derived variant computes what the user's step computes.

A variant derived from a plug-in's step (TensorFlow ``function``, ``xla``, ``loop``;
PyTorch ``compile``) is faster only as a remedy of the *same* program. Tracing a step
runs its Python code once: Python-side state the step changes each call (a learning
rate decayed in Python, a counter) freezes at the trace, and the traced variant no
longer trains as written. So before such a variant is recommended, the step as written
(the ``eager`` variant's workload) and the variant are each built through the builder
with the same seed (as the workloads' ``setup`` does) and run for a few steps on the
same batch, and what they compute is compared (:func:`compare`): the loss of every
step and the parameters' *changes* Δθ (a learning rate 1 % smaller changes θ by a tiny
relative amount but Δθ by 1 %).

The columns (:func:`same_program_columns`): ``same_program`` (True: agrees, False:
differs, empty: not checked), ``same_program_message`` (why it differs, or why the
check could not run) and ``same_program_s`` (seconds of the check: two builds and a few
steps each, outside the timed blocks). A TensorFlow variant whose step cannot be traced
into a ``tf.function`` at all (Keras ``fit`` inside it) raises
:class:`~crossover_study.study.applicability.NotApplicable` with the reason.

When: TensorFlow variants are checked before the point is timed (the check also finds
the steps that cannot be traced; its ``tf.function``\\ s are other objects than the
timed point's, so nothing it traces or compiles is reused). ``compile`` is checked after
the timed blocks and after the row's compile columns were read: its compilation would
fill the job's Inductor cache, and the timed point's first step would hit it
(``compile_cache``). Seeds (ours, the same program by construction) and plug-ins that
are their own workload class are not checked.
"""

from __future__ import annotations

import math
import re
import sys
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from crossover_study.study.applicability import NotApplicable

#: Steps whose parameter changes are compared (TensorFlow runs one more first, in which
#: lazily built variables are created; its loss is compared too). Three are enough for
#: a learning rate frozen at the trace to show: it differs from the second step on.
STEPS = 3
#: Largest relative difference still called the same program, for both the losses
#: (``max |l_variant - l_eager| / max |l_eager|``) and the parameter changes
#: (``‖Δθ_variant - Δθ_eager‖ / ‖Δθ_eager‖``). fp32 rounds at 6e-8 relative; XLA and
#: Inductor fuse and reassociate reductions, and a few steps compound that (Adam divides
#: by the root of a small second moment, which magnifies it in Δθ). Measured with this
#: module's ``_tf_trace``/``_torch_trace`` and :func:`differences` at batch 64 on the
#: 2-core CPU (2026-12-05): honest TensorFlow steps (a Keras MLP with Adam and a Keras
#: CNN with SGD momentum, as the seeds; tests/test_same_program.py writes both) gave at most
#: 1.5e-07 (losses) and 1.0e-07 (Δθ) under ``xla``, 7.8e-08 under ``function`` and
#: ``loop``; ``compile`` of examples/digits_cnn.py, tests/plugins/torch_dataloader.py
#: and torch_numpy_augment.py at most 1.0e-07 and 8.3e-06. A learning rate frozen at
#: the trace (tests/plugins/tf_decaying_lr.py) gave 5.9e-02 and 7.2e-01; a learning rate
#: 1 % off moves an SGD step's Δθ by 1e-02. 1e-3 sits 100 times above the first and 10
#: times below the last.
TOLERANCE = 1e-3
#: The derived variants checked, per framework.
CHECKED: dict[str, tuple[str, ...]] = {
    "tensorflow": ("function", "xla", "loop"),
    "torch": ("compile",),
}
#: Why a variant computes otherwise, per framework (the message's second half).
CAUSES: dict[str, str] = {
    "tensorflow": (
        "traced once, the step's Python code ran only at the trace, so Python state it "
        "changes each call (a learning rate, a counter) stays at its first value"
    ),
    "torch": (
        "compiled, the step no longer runs its Python code each call as written (Python "
        "state it changes each call, a learning rate or a counter, may be frozen in the "
        "compiled graph)"
    ),
}
#: Keras calls that run only eagerly (named in the reason a step cannot be traced).
_EAGER_ONLY = ("fit", "predict", "evaluate", "train_on_batch", "test_on_batch")


@dataclass
class Trace:
    """What a few steps of one program computed: ``losses`` (one float per step) and
    ``deltas`` (each parameter's change over the compared steps, NumPy arrays in the
    variables' creation order; None when the parameters could not be found)."""

    losses: list[float] = field(default_factory=list)
    deltas: list[np.ndarray] | None = None


def stage(point, workload) -> str | None:
    """When ``point`` (a ``PointSpec``) is checked: ``"before"`` the timing (TensorFlow
    ``function``/``xla``/``loop`` of a ``TFStep``), ``"after"`` it (``compile`` of a
    ``TorchStep``), or None (a seed, a plug-in's own workload class, another variant)."""
    if point.variant not in CHECKED.get(point.framework, ()):
        return None
    name = type(workload).__name__
    if point.framework == "tensorflow" and name == "TFPluginWorkload":
        return "before"
    if point.framework == "torch" and name == "TorchPluginWorkload":
        return "after"
    return None


def same_program_columns(point, workload, when: str) -> dict:
    """The check's columns for ``point`` at stage ``when`` (``"before"``/``"after"`` the
    timing; ``{}`` when the point is not checked then, :func:`stage`).

    ``workload`` is the point's own (timed) workload; the check builds two others of
    its class from its builder and sizes (a third, the step as written again, when the
    variant differs: where the step itself does not repeat from the seed, the variant
    is not checked, ``same_program`` empty and the message says why). Raises NotApplicable when the variant's step
    cannot be traced (TensorFlow). Any other failure of the check leaves
    ``same_program`` empty with the failure in ``same_program_message`` (the timed point
    meets it itself if it is the program's), the traceback in the job's log.
    """
    if stage(point, workload) != when:
        return {}
    started = time.perf_counter()
    try:
        run = _tf_trace if point.framework == "tensorflow" else _torch_trace
        derived = run(workload, point.variant)  # first: a step that cannot be traced
        eager = run(workload, "eager")
        same, message = compare(eager, derived, point.framework)
        if same is False:  # the step's own randomness, or the variant's?
            own = differences(eager, run(workload, "eager"))
            if max(own) > TOLERANCE:
                same, message = None, unrepeatable_message(*own)
    except NotApplicable:
        raise
    except Exception as exc:  # noqa: BLE001 - the check never costs the point its row
        print(f"{point.key()}: the same-program check failed:", file=sys.stderr)
        traceback.print_exception(exc, file=sys.stderr)
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        same, message = None, f"not checked: the check failed ({text.splitlines()[-1][:300]})"
    return {
        "same_program": same,
        "same_program_message": message,
        "same_program_s": time.perf_counter() - started,
    }


def _relative(a: np.ndarray, b: np.ndarray, scale: float) -> float:
    """``max |a - b| / scale`` with NaN equal to NaN; inf where only one is NaN."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    both = np.isnan(a) & np.isnan(b)
    if (np.isnan(a) ^ np.isnan(b)).any():
        return math.inf
    diff = np.where(both, 0.0, np.abs(a - b))
    if not diff.size or not diff.max():
        return 0.0
    return float(diff.max() / scale) if scale > 0 else math.inf


def unrepeatable_message(loss_diff: float, param_diff: float) -> str:
    """Why a variant is not checked when the step as written, built twice with the same
    seed, already computes differently (its own relative differences given)."""
    return (
        "not checked: the step as written, built twice with the same seed, computes "
        f"differently itself (relative difference {max(loss_diff, param_diff):.1e}: "
        "randomness the seed does not reach, such as np.random.default_rng() without a "
        "seed, or nondeterministic kernels), so a variant's difference cannot be told "
        "from it"
    )


def differences(eager: Trace, derived: Trace) -> tuple[float, float]:
    """``(losses, parameter changes)``: the relative differences of two traces (see
    :func:`compare`); 0.0 for the parameters when either trace has none or their shapes
    differ, inf where one is NaN and the other not."""
    el, dl = np.asarray(eager.losses), np.asarray(derived.losses)
    finite = np.abs(el[np.isfinite(el)])
    loss_diff = _relative(el, dl, float(finite.max()) if finite.size else 0.0)
    if eager.deltas is None or derived.deltas is None or not eager.deltas:
        return loss_diff, 0.0
    if [d.shape for d in eager.deltas] != [d.shape for d in derived.deltas]:
        return loss_diff, 0.0
    e = np.concatenate([d.ravel() for d in eager.deltas]).astype(np.float64)
    v = np.concatenate([d.ravel() for d in derived.deltas]).astype(np.float64)
    norm = float(np.linalg.norm(e[np.isfinite(e)]))
    diff = np.where(np.isnan(e) & np.isnan(v), 0.0, e - v)
    gap = float(np.linalg.norm(diff)) if np.isfinite(diff).all() else math.inf
    return loss_diff, 0.0 if gap == 0 else (gap / norm if norm > 0 else math.inf)


def compare(eager: Trace, derived: Trace, framework: str, tolerance: float = TOLERANCE):
    """``(same, message)``: whether ``derived`` computed what ``eager`` did, within
    ``tolerance`` relative (:data:`TOLERANCE`): losses against the largest eager loss,
    parameter changes as ``‖Δθ_derived - Δθ_eager‖ / ‖Δθ_eager‖`` over all parameters
    together (:func:`differences`). ``message`` is None when they agree, else the reason
    in words (``framework``: ``torch`` or ``tensorflow``, :data:`CAUSES`)."""
    loss_diff, param_diff = differences(eager, derived)
    what = [
        name
        for name, d in (("losses", loss_diff), ("parameter changes", param_diff))
        if d > tolerance
    ]
    if not what:
        return True, None
    worst = max(loss_diff, param_diff)
    return False, (
        f"its {' and '.join(what)} over {len(eager.losses)} steps differ from the step as "
        f"written (largest relative difference {worst:.1e}, tolerance {tolerance:.0e}): "
        f"{CAUSES[framework]}"
    )


# --- TensorFlow ---------------------------------------------------------------------


def _tf_trace(timed, variant: str) -> Trace:
    """Build ``timed``'s program again as ``variant`` (same builder, sizes and seed),
    trace the variant's function (NotApplicable when that raises), run one step, then
    :data:`STEPS` more: the losses of all and Δθ over the last :data:`STEPS`.

    The parameters are every ``tf.Variable`` the program creates while it is built and
    in its first step (a ``tf.variable_creator_scope``: model weights, optimizer slots,
    counters; Keras 3 variables hold one), in creation order, which is the same in both
    builds. An outer ``GradientTape`` over the first step (its ``watched_variables``)
    would change the program: a traced step that takes its batch from a ``tf.data``
    iterator then fails ("No gradient defined for operation 'IteratorGetNext'")."""
    import tensorflow as tf

    created: list = []

    def record(next_creator, **kwargs):
        variable = next_creator(**kwargs)
        created.append(variable)
        return variable

    workload = type(timed)(timed.builder, timed.device, timed.sizes, variant)
    with tf.variable_creator_scope(record):
        workload.setup()
        if variant != "eager":
            _trace_or_not_applicable(workload, variant)
        try:
            workload.run(1)
        except tf.errors.InvalidArgumentError as exc:  # XLA compiles at the first call
            if variant != "xla" or "unsupported operations" not in str(exc):
                raise
            raise NotApplicable(unsupported_by_xla(exc)) from exc
    trace = Trace(losses=[workload.loss()])
    variables = [v for v in created if isinstance(v, tf.Variable)]
    before = [v.numpy().copy() for v in variables]
    for _ in range(STEPS):
        workload.run(1)
        trace.losses.append(workload.loss())
    trace.deltas = [v.numpy() - b for v, b in zip(variables, before, strict=True)]
    return trace


def _trace_or_not_applicable(workload, variant: str) -> None:
    """Trace ``workload``'s compiled step (``get_concrete_function`` on its batch: the
    step's Python code runs once, nothing executes); raise NotApplicable with the reason
    when tracing raises."""
    import tensorflow as tf

    batch = workload._batch()
    try:
        if workload.loop is not None:
            workload.loop.get_concrete_function(tf.constant(1), *batch)
        else:
            workload.training_step.get_concrete_function(*batch)
    except Exception as exc:  # noqa: BLE001 - whatever tracing the user's step raises
        raise NotApplicable(untraceable_reason(exc, variant)) from exc


def untraceable_reason(exc: BaseException, variant: str) -> str:
    """Why the step cannot be traced for ``variant``, in words, from what tracing raised:
    the Keras call that runs only eagerly when the user's line in the error names one,
    the user's line, and the exception's name and first sentence."""
    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    last = lines[-1] if lines else type(exc).__name__
    name = type(exc).__name__
    if not last.startswith(name):
        last = f"{name}: {last}"
    first_sentence = re.split(r"(?<=\.)\s", last, maxsplit=1)[0]
    source = None  # the innermost user frame: autograph's 'File "...", line N, in f  *'
    for i, line in enumerate(lines[:-1]):
        if line.startswith("File ") and line.endswith("*") and not line.endswith("**"):
            source = lines[i + 1]
    calls = "|".join(_EAGER_ONLY)
    keras_call = re.search(rf"\.({calls})\(", source or "") or re.search(rf"\.({calls})\(", text)
    why = f": it calls Keras {keras_call.group(1)}, which runs only eagerly" if keras_call else ""
    where = f" (at `{source}`)" if source else ""
    return (
        f"the step cannot be traced into a tf.function ({variant}){why}{where} "
        f"({first_sentence[:300]})"
    )


def unsupported_by_xla(exc: BaseException) -> str:
    """Why XLA cannot compile the step, from the error of its first call (TensorFlow's
    "Detected unsupported operations when trying to compile graph ...: OP (No
    registered 'OP' OpKernel for XLA_... devices ...)")."""
    ops = sorted(set(re.findall(r"No registered '(\w+)' OpKernel", str(exc))))
    named = ", ".join(ops) or "an operation"
    return (
        f"XLA cannot compile the step: it runs {named}, which XLA has no kernel for "
        "(jit_compile=True needs every operation of the step compilable; a tf.data "
        "iterator read inside the step is not)"
        if "IteratorGetNext" in ops
        else f"XLA cannot compile the step: it runs {named}, which XLA has no kernel for"
    )


# --- PyTorch ------------------------------------------------------------------------


def _torch_trace(timed, variant: str) -> Trace:
    """Build ``timed``'s program again as ``variant`` (same builder, sizes and seed) and
    run :data:`STEPS` steps: their losses and Δθ of the TorchStep optimizer's parameters
    (None without an optimizer)."""
    import torch

    workload = type(timed)(timed.builder, timed.device_class, timed.sizes, variant)
    workload.setup()
    optimizer = workload.program.optimizer
    params = (
        [p for group in optimizer.param_groups for p in group["params"]]
        if optimizer is not None
        else None
    )
    with torch.no_grad():
        before = None if params is None else [p.detach().clone() for p in params]
    trace = Trace()
    for _ in range(STEPS):
        workload.run(1)
        trace.losses.append(workload.loss())
    if params is not None:
        with torch.no_grad():
            trace.deltas = [
                (p.detach() - b).float().cpu().numpy() for p, b in zip(params, before, strict=True)
            ]
    return trace
