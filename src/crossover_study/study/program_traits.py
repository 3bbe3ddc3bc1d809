"""The traits of a program that decide which variants apply to it
(:mod:`crossover_study.study.applicability` reads them): what each trait means
(:data:`KINDS`), those the case registry knows of a case (:func:`case_kind`), and the
trait of a program's own loss-read interval (:func:`loss_kind`), which only its workload
knows.
"""

from __future__ import annotations

from crossover_study.study import cases

#: The traits of a program the applicability table's rows look at (a point's ``kind``
#: is a set of them): :func:`case_kind` gives those the case registry knows, the workloads add those
#: only they know (:func:`loss_kind` for the loss-read interval).
KINDS: dict[str, str] = {
    "plugin": "a case of the user's own (a plug-in), not one of the four seeds",
    "other_framework": "the case has no entry point in the point's framework",
    "replicas": "the case is measured with data-parallel replicas (registry flag)",
    "fit_replicas": "the case's seed trained with Keras fit (mirrored_fit; registry flag)",
    "keras_fit": "the program is Keras fit (the seed's Keras rows, or a plug-in's KerasFit)",
    "lstm": "the model has an LSTM layer (registry flag)",
    "replicated": "the point has more than one replica",
    "one_device": "a one-device workload built directly, not through the program table",
    "function_step": "the TensorFlow step already is a tf.function",
    "double_backward": "the step differentiates twice (create_graph=True)",
    "fit_reads_every_step": "Keras 3 fit, which reads its loss every step",
    "loss_every_1": "the program itself reads the loss every step",
    "loss_every_1000": "the program itself reads the loss every 1000 steps",
    "step": "a plug-in's one step (TorchStep or TFStep), known once its builder ran",
    "no_data": "a plug-in's step without data (its data is empty), known once built",
}


def case_kind(case: str, framework: str | None = None) -> frozenset[str]:
    """The traits (:data:`KINDS`) the case registry knows of ``case``'s program in
    ``framework`` (``None``: not asked): ``plugin``, ``other_framework`` and the
    registry's flags (``lstm``, ``keras_fit``, ``replicas``, ``fit_replicas``). Raises
    KeyError for an unknown case."""
    own = cases.get(case)
    kind = {
        flag for flag in ("lstm", "keras_fit", "replicas", "fit_replicas") if getattr(own, flag)
    }
    if not own.builtin:
        kind.add("plugin")
        if framework is not None and framework not in own.frameworks:
            kind.add("other_framework")
    return frozenset(kind)


def loss_kind(every: int) -> frozenset[str]:
    """The trait of a program that itself reads its loss every ``every`` steps
    (``loss_every_<n>``; 0: once per timed block, no trait)."""
    return frozenset({f"loss_every_{every}"}) if every else frozenset()
