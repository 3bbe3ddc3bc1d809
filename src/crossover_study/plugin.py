"""What a plug-in's builder returns: one training step and the data it needs.

A case of your own is a Python file with one function (``docs/PLUGINS.md``; templates
in ``examples/``)::

    from crossover_study.plugin import TorchStep

    def build(device, batch: int, channels: int) -> TorchStep:
        model = ...to(device)
        opt = torch.optim.Adam(model.parameters())
        x, y = ...  # one batch, on the host

        def step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss

        return TorchStep(step, data=(x, y), optimizer=opt)

``build`` gets the device (a ``torch.device`` for PyTorch; for TensorFlow the device
string, with ``build`` already running inside ``tf.device``) and every size axis of the
case as a keyword argument. It writes *one training step*; the library does the rest,
as ``torch.utils.benchmark.Timer`` takes a ``stmt`` and its ``setup``: it places the
data, times cold start, first step, warm-up and steady state with the device
synchronised at block boundaries only, and derives the remedies from the same step
(``compile`` and ``cuda_graph`` capture it, ``function`` and ``xla`` wrap it,
``copy_data_each_step`` feeds the batch from the host, the loss-read variants read it
more or less often). Nothing here imports torch or TensorFlow.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


def _check_every(value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"loss_read_every must be an int >= 0, got {value!r}")


@dataclass
class TorchStep:
    """One PyTorch training step and its batch.

    ``step(*data) -> loss``: one optimiser step on the batch, returning the loss as a
    0-d tensor (not ``.item()``: reading it back is the library's, on the schedule of
    ``loss_read_every``). ``data``: the tensors of one batch, built on the host (CPU);
    the library places them on the device once and passes the device copies to every
    step (``copy_data_each_step``: copies them from the host every step instead). An
    empty ``data`` means the step makes its own batch (on the device). ``optimizer``:
    the ``torch.optim.Optimizer`` the step uses, if any; ``cuda_graph`` switches it to
    ``capturable`` before capturing the step (Adam, AdamW, SGD and others support it).
    ``loss_read_every``: how often your own loop reads the loss back (``loss.item()``):
    every step (1, the default, as a loop that logs its loss does), every n steps, or 0
    for never inside the loop.
    """

    step: Callable[..., Any]
    data: tuple = ()
    optimizer: Any = None
    loss_read_every: int = 1
    #: Not a seed's program (how the study words a variant that does not apply).
    seed_program = False

    def __post_init__(self) -> None:
        if not callable(self.step):
            raise TypeError(f"TorchStep.step must be callable, got {type(self.step).__name__}")
        self.data = tuple(self.data)
        _check_every(self.loss_read_every)


@dataclass
class TFStep:
    """One TensorFlow training step and its batch.

    ``step(*data) -> loss``: one optimiser step (``tf.GradientTape`` and
    ``apply_gradients``) returning the loss tensor. Written as a plain Python function it
    runs eagerly, op by op, as you wrote it; already decorated with ``tf.function`` it
    runs as that graph. ``function`` and ``xla`` wrap the plain function in
    ``tf.function`` (``jit_compile=True`` for ``xla``); ``loop`` runs many steps in one
    ``tf.function``. ``data``: NumPy arrays (or tensors) of one batch; the library
    places them on the device once (``copy_data_each_step``: converts them from host
    memory every step). ``loss_read_every`` as for :class:`TorchStep`.
    """

    step: Callable[..., Any]
    data: tuple = ()
    loss_read_every: int = 1
    #: Not a seed's program (how the study words a variant that does not apply).
    seed_program = False

    def __post_init__(self) -> None:
        if not callable(self.step):
            raise TypeError(f"TFStep.step must be callable, got {type(self.step).__name__}")
        self.data = tuple(self.data)
        _check_every(self.loss_read_every)


@dataclass
class KerasFit:
    """A Keras model trained with ``Model.fit``, as you call it.

    ``model``: an uncompiled ``keras.Model``; ``compile``: the keyword arguments of
    ``model.compile`` (``optimizer``, ``loss``, ``metrics``...), without ``jit_compile``
    and ``steps_per_execution``, which the library pins (``False`` and 1; Keras's
    "auto" would turn XLA on on GPUs only and so compare different programs): the
    ``xla`` variant compiles with ``jit_compile=True``, ``steps_per_execution`` runs
    a whole epoch per call. ``x``, ``y``: the training data as ``fit`` takes it: one
    array (NumPy, or a tensor), a list or tuple of arrays (a model of several inputs or
    outputs) or a dict of named arrays, every array with the same number of samples
    (:func:`sample_count`); a generator or a ``tf.data.Dataset`` is refused (the library
    times whole epochs of a known length); ``batch_size``: samples per step; one epoch
    is ``ceil(samples / batch_size)`` steps and a timed block is one ``fit`` call of
    whole epochs. ``fit``: further keyword
    arguments of ``fit`` (``validation_data``, ``callbacks``, ``shuffle``...; not
    ``epochs``, ``initial_epoch``, ``batch_size``, ``steps_per_epoch`` or ``verbose``,
    which the library sets; ``verbose`` is 0). A pinned key raises ValueError here, and
    one written literally in the plug-in file is refused at config validation already
    (:func:`pinned_arguments`).
    """

    model: Any
    x: Any
    y: Any
    batch_size: int
    compile: Mapping[str, Any] = field(default_factory=dict)
    fit: Mapping[str, Any] = field(default_factory=dict)

    #: Keys of ``compile`` and ``fit`` the library sets itself.
    PINNED_COMPILE = ("jit_compile", "steps_per_execution")
    PINNED_FIT = (
        "epochs",
        "initial_epoch",  # fit runs epochs - initial_epoch epochs: the steps timed
        "batch_size",
        "verbose",
        "x",
        "y",
        "steps_per_epoch",
    )

    def __post_init__(self) -> None:
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"KerasFit.batch_size must be a positive int, got {self.batch_size!r}")
        for name, given, pinned in (
            ("compile", self.compile, self.PINNED_COMPILE),
            ("fit", self.fit, self.PINNED_FIT),
        ):
            clash = sorted(set(given) & set(pinned))
            if clash:
                raise ValueError(
                    f"KerasFit.{name} must not set {', '.join(clash)}: the library pins "
                    f"{', '.join(pinned)} so that every device runs the same program"
                )
        samples, targets = sample_count(self.x, "x"), sample_count(self.y, "y")
        if samples != targets:
            raise ValueError(f"KerasFit: x has {samples} samples but y has {targets}")
        validation = dict(self.fit).get("validation_data")
        if validation is not None:
            if not isinstance(validation, tuple | list) or len(validation) not in (2, 3):
                raise ValueError(
                    "KerasFit.fit validation_data: give (x_val, y_val) or (x_val, y_val, "
                    "sample_weight) of arrays, as fit takes it"
                )
            held, held_targets = (
                sample_count(validation[0], "validation_data x"),
                sample_count(validation[1], "validation_data y"),
            )
            if held != held_targets:
                raise ValueError(
                    f"KerasFit: validation_data's x has {held} samples but its y has {held_targets}"
                )


#: What to pass instead of data whose length the library cannot know.
_PASS_ARRAYS = (
    "pass arrays (NumPy or tensors; a list, tuple or dict of them for several inputs), "
    "whose sample count makes an epoch's steps known, or write the step yourself as a TFStep"
)


def sample_count(data: Any, name: str = "x") -> int:
    """Samples in ``data`` as Keras ``fit`` takes it (``name`` says which argument, for
    the message): one array (its first dimension: ``shape[0]``, else ``len``), a list
    or tuple of arrays, or a dict of named arrays (every one the same count). Raises
    ValueError naming the argument for data of no known length (a generator, an
    iterator, a ``tf.data.Dataset``, a ``keras.utils.PyDataset``), for arrays of
    different sample counts, for an empty structure and for a scalar."""
    if data is None:
        raise ValueError(f"KerasFit.{name} is None: {_PASS_ARRAYS}")
    if isinstance(data, Iterator) or hasattr(data, "element_spec") or hasattr(data, "num_batches"):
        kind = type(data).__name__
        raise ValueError(
            f"KerasFit.{name} is a {kind}, whose length the library cannot know before "
            f"fit runs (it times whole epochs): {_PASS_ARRAYS}"
        )
    shape = getattr(data, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    if isinstance(data, Mapping) or isinstance(data, list | tuple):
        items = list(data.items()) if isinstance(data, Mapping) else list(enumerate(data))
        if not items:
            raise ValueError(f"KerasFit.{name} is empty: {_PASS_ARRAYS}")
        counts = {key: sample_count(value, f"{name}[{key!r}]") for key, value in items}
        if len(set(counts.values())) > 1:
            listed = ", ".join(f"{key!r}: {count}" for key, count in counts.items())
            raise ValueError(f"KerasFit.{name}: its arrays hold different sample counts ({listed})")
        return next(iter(counts.values()))
    raise ValueError(f"KerasFit.{name} is a {type(data).__name__}, not an array: {_PASS_ARRAYS}")


#: The kinds of program a builder may return.
PROGRAM_KINDS = (TorchStep, TFStep, KerasFit)

#: ``KerasFit``'s arguments whose keys the library pins: name, position, pinned keys.
_PINNED_ARGUMENTS = (
    ("compile", 4, KerasFit.PINNED_COMPILE),
    ("fit", 5, KerasFit.PINNED_FIT),
)


def _literal_keys(node: ast.AST, names: Mapping[str, list[ast.AST]], depth: int = 0) -> set:
    """The string keys a mapping expression certainly holds, read from the source: a
    dict display (``{"epochs": 3, **more}``), ``dict(epochs=3)``, or a name the module
    assigns one of those to (every such assignment counts). Anything else: none."""
    if depth > 5:
        return set()
    keys: set[str] = set()
    if isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:  # {**more}
                keys |= _literal_keys(value, names, depth + 1)
            elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                keys.add(key.value)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        for arg in node.args[:1]:
            keys |= _literal_keys(arg, names, depth + 1)
        for kw in node.keywords:
            if kw.arg is None:
                keys |= _literal_keys(kw.value, names, depth + 1)
            else:
                keys.add(kw.arg)
    elif isinstance(node, ast.Name):
        for value in names.get(node.id, ()):
            keys |= _literal_keys(value, names, depth + 1)
    return keys


def pinned_arguments(tree: ast.Module) -> Iterator[tuple[int, str, str]]:
    """Keys a plug-in's source sets in ``KerasFit``'s ``compile`` or ``fit`` that the
    library pins (:attr:`KerasFit.PINNED_COMPILE`, :attr:`KerasFit.PINNED_FIT`), read
    without importing it (``tree``: the parsed file): ``(line, argument, key)`` for
    each, in source order. Finds keys written as literals (:func:`_literal_keys`) in
    calls of ``KerasFit`` or ``<module>.KerasFit``; a key computed at run time is left
    to :class:`KerasFit`'s own check."""
    names: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names.setdefault(target.id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and node.value is not None:
            if isinstance(node.target, ast.Name):
                names.setdefault(node.target.id, []).append(node.value)
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == "KerasFit")
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "KerasFit")
        )
    ]
    for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
        given = {kw.arg: kw.value for kw in call.keywords if kw.arg is not None}
        for argument, position, pinned in _PINNED_ARGUMENTS:
            value = given.get(argument)
            before = call.args[: position + 1]
            if value is None and len(before) > position:
                if any(isinstance(arg, ast.Starred) for arg in before):
                    continue  # KerasFit(*args): the position is not known
                value = call.args[position]
            if value is None:
                continue
            for key in sorted(_literal_keys(value, names) & set(pinned)):
                yield call.lineno, argument, key
