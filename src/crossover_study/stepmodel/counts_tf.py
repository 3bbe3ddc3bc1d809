"""TensorFlow's step counted: the ops an op callback sees while functions run
eagerly, those a second call runs inside a compiled graph, ``MatMul`` FLOPs from
their shapes, and each Keras LSTM or GRU call that would run on cuDNN with the ops it
accounts for (:func:`count_tf_step`, :func:`count_keras_rnn_call`).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections import Counter
from collections.abc import Callable

from crossover_study.stepmodel.record import (
    StepCounts,
    rnn_module_rows,
    rows_per_step,
)

#: TensorFlow ops whose FLOPs are counted (2·m·k·n from their shapes).
TF_MATMUL_OPS = frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"})


#: TensorFlow ops that move no tensor data (aliases, shapes, constants): no mem_bytes.
TF_NO_DATA_OPS = frozenset(
    {"Identity", "ReadVariableOp", "Reshape", "Const", "NoOp", "Shape", "ExpandDims", "Squeeze"}
)


def _tf_callback(state: dict, traced: bool = False):
    """An op callback that counts into ``state`` the ops it sees executed eagerly or,
    with ``traced``, the ops created while a function is traced (symbolic tensors with
    static shapes; inputs, constants and aliases left out)."""

    def callback(op_type, inputs, attrs, outputs, op_name=None, graph=None):
        if (graph is not None) != traced:
            return None
        if isinstance(op_type, bytes):
            op_type = op_type.decode()
        if traced and op_type in TF_NO_DATA_OPS | {"Placeholder"}:
            return None
        if op_type in TF_NEXT_BATCH_OPS and not traced:
            _window(state)
        state["ops"] += 1
        if op_type.startswith("__inference_") or op_type.startswith("__forward_"):
            state["calls"] += 1  # a call of a traced function: one eager op
            state["names"].append(op_type)
            return None
        sizes = [t for t in list(inputs) + list(outputs or []) if hasattr(t, "shape")]
        if op_type in TF_MATMUL_OPS and inputs and outputs:
            # Eager attrs are Python values; traced ones AttrValue protos (their .b).
            names = dict(zip(attrs[::2], attrs[1::2], strict=False)) if attrs else {}
            flag = {key: getattr(value, "b", value) for key, value in names.items()}
            a = inputs[0]
            trans_a = bool(flag.get("transpose_a") or flag.get("adj_x"))
            trans_b = bool(flag.get("transpose_b") or flag.get("adj_y"))
            k = a.shape[-2] if trans_a else a.shape[-1]
            try:
                state["flops"] += 2.0 * math.prod(outputs[0].shape) * int(k)
                state["flop_ops"] += 1
                out = [int(d) for d in outputs[0].shape]
                product = (math.prod(out[:-2]), out[-2], int(k), out[-1], trans_a, trans_b)
                state["products"][product] += 1
            except TypeError:  # a dimension unknown at trace time: the product left out
                pass
        elif op_type not in TF_NO_DATA_OPS:
            moved = sum(_tf_nbytes(t) for t in sizes)
            state["mem_bytes"] += moved
            state["mem_ops"] += moved > 0
        if outputs and not traced:
            out_device = _device_type(outputs[0])
            state["copy_bytes"] += sum(
                _tf_nbytes(t) for t in inputs if _device_type(t) not in (None, out_device)
            )
        return None

    return callback


#: TensorFlow ops that fetch a step's batch from a dataset iterator: one per step of
#: Keras fit (its train function starts with one), so they mark the steps while a
#: function runs eagerly.
TF_NEXT_BATCH_OPS = frozenset({"IteratorGetNext", "IteratorGetNextAsOptional"})


#: Steps counted between batch fetches when a program fetches its batches from an
#: iterator: a call of Keras fit runs an epoch of identical steps, of which these are
#: enough (s004-lstm's 38 to 150 steps per call took 50 s to count whole).
WINDOW_STEPS = 2


#: A program's batch fetches (while its data set is set up, per step) on one device:
#: none at set-up, one per step. What places the counting window (:func:`_window`)
#: unless the workload says otherwise (its ``batch_fetches``).
ONE_DEVICE_FETCHES = (0, 1)


_COUNTED = ("ops", "flops", "flop_ops", "mem_bytes", "mem_ops", "copy_bytes")


class _WindowFull(Exception):
    """Raised from the op callback once :data:`WINDOW_STEPS` steps are counted."""


def _window(state: dict) -> None:
    """At a batch fetch: the first fetch of the first step (after the data set's
    ``setup_fetches``) opens the window (counts so far kept aside), the first of the
    step :data:`WINDOW_STEPS` steps later (``fetches_per_step`` fetches a step) closes it
    and stops the step."""
    state["fetches"] += 1
    setup, per_step = state["setup_fetches"], state["fetches_per_step"]
    if state["fetches"] == setup + 1:
        state["before"] = {key: state[key] for key in _COUNTED}
        state["before"]["products"] = Counter(state["products"])
    elif state["fetches"] == setup + WINDOW_STEPS * per_step + 1 and state["windowed"]:
        raise _WindowFull


def _new_state(windowed: bool = False, fetches: tuple[int, int] = ONE_DEVICE_FETCHES) -> dict:
    """A fresh count; ``fetches`` = (the data set's fetches while it is set up, fetches
    per step), which place the window (:func:`_window`)."""
    return {
        "fetches": 0,
        "setup_fetches": fetches[0],
        "fetches_per_step": fetches[1],
        "windowed": windowed,
        "before": None,
        "ops": 0,
        "calls": 0,
        "names": [],
        "flops": 0.0,
        "flop_ops": 0,
        "mem_bytes": 0.0,
        "mem_ops": 0,
        "copy_bytes": 0.0,
        "products": Counter(),
    }


def _tf_retraced(functions, names: list[str]) -> dict | None:
    """Counts of the calls ``names`` (traced functions' names, one per call) made to
    the ``tf.function`` objects ``functions``, each traced afresh from its Python
    function under the op callback with the input signature it was called with, its
    ops times its calls; None when some call is not of one of them. A loop inside a
    function counts its body once."""
    import tensorflow as tf
    from tensorflow.python.framework import op_callbacks

    per_name = {}
    for fn in functions:
        try:
            concretes = fn._list_all_concrete_functions()  # noqa: SLF001 - no public list
        except AttributeError:
            return None
        for concrete in concretes:
            name = concrete.name.decode() if isinstance(concrete.name, bytes) else concrete.name
            if name not in names or name in per_name:
                continue
            state = _new_state()
            callback = _tf_callback(state, traced=True)
            args, kwargs = concrete.structured_input_signature
            op_callbacks.add_op_callback(callback)
            try:
                tf.function(fn.python_function).get_concrete_function(*args, **kwargs)
            finally:
                op_callbacks.remove_op_callback(callback)
            per_name[name] = state
    if not names or any(name not in per_name for name in names):
        return None
    total = _new_state()
    for name in names:
        for key in _COUNTED:
            total[key] += per_name[name][key]
        total["products"].update(per_name[name]["products"])
    return total


def _tf_function_ops(name: str, seen: dict | None = None) -> int:
    """Operations in the definition of the traced TensorFlow function ``name`` (its
    ``FunctionDef`` in the eager context), the functions it calls (attributes naming a
    function: calls, loop bodies, branches) expanded once each; constants, identities
    and no-ops left out. A static count: a loop body counts once."""
    from tensorflow.python.eager import context

    seen = {} if seen is None else seen
    if name in seen:
        return seen[name]
    seen[name] = 0
    total = 0
    for node in context.context().get_function_def(name).node_def:
        called = [v.func.name for v in node.attr.values() if v.func.name]
        if called:
            total += sum(_tf_function_ops(f, seen) for f in called)
        elif node.op not in TF_NO_DATA_OPS:
            total += 1
    seen[name] = total
    return total


def _device_type(tensor) -> str | None:
    """``CPU``, ``GPU`` or ``TPU`` of an eager tensor's device, None when unknown."""
    device = getattr(tensor, "device", None) or ""
    parts = device.upper().split("DEVICE:")
    return parts[-1].split(":")[0] if len(parts) > 1 else None


def _tf_nbytes(tensor) -> int:
    """Bytes of an eager tensor (0 for an unknown shape or a string)."""
    try:
        return int(math.prod(tensor.shape)) * tensor.dtype.size
    except (TypeError, ValueError, AttributeError):
        return 0


def count_tf_step(
    step: Callable[[], object],
    steps: int = 1,
    functions=(),
    fetches: tuple[int, int] = ONE_DEVICE_FETCHES,
    watch=None,
) -> StepCounts:
    """Run ``step()`` (``steps`` training steps of a built TensorFlow workload) twice
    under an op callback and return the :class:`StepCounts` of one step: once as the
    program runs (its eager ops, a traced function's call counted as one), once with
    ``tf.function`` bodies run eagerly (every op executed, with its shapes: ``ops``,
    ``flops``, ``mem_bytes``, ``copy_bytes``). ``graph_ops`` = ops of the second call
    minus the eager ops of the first that were not function calls.

    A function that cannot run eagerly (s000-hjb's step calls ``tf.gradients``) is
    counted from its trace instead: each of ``functions`` (the workload's
    ``tf.function`` objects) traced afresh under the callback with the signature it was
    called with, its ops and static shapes times its calls (a loop body once); failing
    that, the ops of the traced functions' definitions, without FLOPs or bytes.

    A call of more than :data:`WINDOW_STEPS` steps that fetches its batches from an
    iterator (Keras fit) is counted over a window of that many steps, its start and end
    found by the batch fetches: ``fetches`` = (fetches while the data set is set up,
    before the first step; fetches per step), :data:`ONE_DEVICE_FETCHES` for one device. Under
    MirroredStrategy the distributed data set fetches once per replica at set-up and at
    every step: (replicas, replicas); taken as (0, 1), the window of a 2-replica fit
    held nothing but set-up (20 ops, no FLOPs per step of s004-lstm, default study of
    2026-12-03) and a 1-replica fit's about one step, spread over two.

    ``watch`` (a :class:`~crossover_study.stepmodel.host_calls.HostCalls`) watches the
    first call, the program as it runs (a value read inside a traced body cannot be read
    back there, and NumPy there runs at trace time only).

    The steps really run, so call it outside the timed blocks. Exceptions from the step
    propagate; ValueError for ``steps`` below 1 or ``fetches`` not (≥ 0, ≥ 1).
    """
    import tensorflow as tf
    from tensorflow.python.framework import op_callbacks

    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if fetches[0] < 0 or fetches[1] < 1:
        raise ValueError(f"fetches must be (>= 0, >= 1), got {fetches}")

    rnn_calls, rnn_steps = Counter(), [steps]

    def run(functions_eagerly: bool) -> dict:
        state = _new_state(windowed=functions_eagerly and steps > WINDOW_STEPS, fetches=fetches)
        callback = _tf_callback(state)
        was = tf.config.functions_run_eagerly()
        tf.config.run_functions_eagerly(functions_eagerly)
        op_callbacks.add_op_callback(callback)
        unpatch = _note_keras_rnn(state, rnn_calls) if functions_eagerly else None
        try:
            step()
        except _WindowFull:  # enough identical steps seen: per step from the window
            rnn_steps[0] = WINDOW_STEPS
            for key in _COUNTED:
                state[key] = (state[key] - state["before"][key]) * steps / WINDOW_STEPS
            window = state["products"] - state["before"]["products"]
            state["products"] = Counter(
                {key: count * steps / WINDOW_STEPS for key, count in window.items()}
            )
        finally:
            op_callbacks.remove_op_callback(callback)
            tf.config.run_functions_eagerly(was)
            if unpatch is not None:
                unpatch()
        return state

    with watch if watch is not None else contextlib.nullcontext():
        as_run = run(False)  # the program as it runs (docstring: why watched here)
    eager = as_run["ops"] - as_run["calls"]
    source = "MatMul shapes of the ops executed"
    try:
        every = run(True)
        graph_ops = max(0, every["ops"] - eager)
    except Exception:  # noqa: BLE001 - a function that only runs traced (tf.gradients)
        every = _tf_retraced(functions, as_run["names"])
        if every is None:  # the definitions' ops, without shapes
            graph_ops = sum(_tf_function_ops(name) for name in as_run["names"])
            return StepCounts(
                ops=(eager + graph_ops) / steps,
                ops_kind="tf_ops",
                graph_ops=graph_ops / steps,
                flops=None,
                flops_source="not counted: the step's tf.function cannot run eagerly",
                mem_bytes=None,
                copy_bytes=as_run["copy_bytes"] / steps,
                function_calls=as_run["calls"] / steps,
            )
        graph_ops = every["ops"]
        every["ops"] += eager
        every["copy_bytes"] = as_run["copy_bytes"]
        every["products"] += as_run["products"]  # the traced ones and the eager ones
        source = "MatMul shapes of the step's tf.function traced afresh (a loop body once)"
    return StepCounts(
        ops=every["ops"] / steps,
        ops_kind="tf_ops",
        graph_ops=graph_ops / steps,
        flops=every["flops"] / steps,
        flops_source=source,
        mem_bytes=every["mem_bytes"] / steps,
        mem_ops=every["mem_ops"] / steps,
        flop_ops=every["flop_ops"] / steps,
        copy_bytes=every["copy_bytes"] / steps,
        function_calls=as_run["calls"] / steps,
        # The first call saw only the products run eagerly; the rest ran in a graph.
        products=tuple(
            sorted(
                rows_per_step(as_run["products"], steps, False)
                + rows_per_step(every["products"] - as_run["products"], steps, True)
            )
        ),
        rnn_modules=_keras_rnn_modules(rnn_calls, rnn_steps[0]),
    )


# --------------------------------------------------------------------------- Keras RNNs
def _keras_rnn_spec(layer, sequences) -> tuple | None:
    """What rebuilds one call of a Keras ``LSTM`` or ``GRU`` layer that would run on cuDNN
    on a GPU: ``(class name, layer config as JSON, input shape (B, T, I), dtype)``; None
    for another layer or one Keras would run as its own loop on a GPU too. Keras 3 runs
    ``backend.lstm``/``backend.gru`` (``tf.raw_ops.CudnnRNNV3``, one op a call) where
    ``use_cudnn`` is ``"auto"`` or True, ``recurrent_dropout`` is 0 and the arguments
    suit cuDNN (tanh, sigmoid, not unrolled, a bias, a GRU's ``reset_after``) and a GPU
    is present (keras.io, LSTM and GRU layers; keras/src/layers/rnn/lstm.py
    ``inner_loop``; keras/src/backend/tensorflow/rnn.py ``cudnn_ok``). SimpleRNN has no
    cuDNN path."""
    import importlib

    try:  # the module (the package's ``rnn`` attribute is its function of that name)
        tf_rnn = importlib.import_module("keras.src.backend.tensorflow.rnn")
    except ImportError:
        return None
    name = type(layer).__name__
    if name not in ("LSTM", "GRU") or layer.use_cudnn not in ("auto", True):
        return None
    if layer.recurrent_dropout or len(getattr(sequences, "shape", ())) != 3:
        return None
    args = (layer.activation, layer.recurrent_activation, layer.unroll, layer.use_bias)
    # Keras's own test of the arguments (cudnn_ok less its "a GPU is present").
    if name == "LSTM":
        suits = tf_rnn._do_lstm_arguments_support_cudnn(*args)  # noqa: SLF001
    else:
        gru_test = tf_rnn._do_gru_arguments_support_cudnn  # noqa: SLF001
        suits = gru_test(*args, reset_after=layer.reset_after)
    if not suits:
        return None
    config = json.dumps(layer.get_config(), sort_keys=True, default=str)
    shape = tuple(int(d) for d in sequences.shape)
    return (name, config, shape, sequences.dtype.name)


def _note_keras_rnn(state: dict, calls: Counter):
    """Wrap Keras's LSTM and GRU ``inner_loop`` so that each eager call inside the
    counting window (:func:`_window`) is noted in ``calls`` (:func:`_keras_rnn_spec` ->
    calls); returns what undoes it (None without Keras)."""
    try:
        from keras.src.layers.rnn.gru import GRU
        from keras.src.layers.rnn.lstm import LSTM
    except ImportError:
        return None
    import tensorflow as tf

    originals = {cls: cls.inner_loop for cls in (LSTM, GRU)}

    def wrap(original):
        def inner_loop(self, sequences, *args, **kwargs):
            opened = not state["windowed"] or state["before"] is not None
            if tf.executing_eagerly() and opened:
                try:
                    spec = _keras_rnn_spec(self, sequences)
                except Exception:  # noqa: BLE001 - noting a call never breaks the step
                    spec = None
                if spec is not None:
                    calls[spec] += 1
            return original(self, sequences, *args, **kwargs)

        return inner_loop

    for cls, original in originals.items():
        cls.inner_loop = wrap(original)

    def undo():
        for cls, original in originals.items():
            cls.inner_loop = original

    return undo


def count_keras_rnn_call(spec: tuple) -> dict:
    """One Keras LSTM or GRU call rebuilt from its :func:`_keras_rnn_spec` (a new layer of
    the same config, random input of the same shape) counted eagerly, forward and the
    gradient of its weights and input, under the step's op callback: what the call
    accounts for in the step's counts. Returns the fields of
    :data:`~crossover_study.stepmodel.record.RNN_MODULE_KEYS` but ``per_step`` (``kind``
    ``LSTM`` or ``GRU``, one layer, one direction; ``products`` [[FLOPs, calls]];
    ``elementwise`` empty: TensorFlow's element-wise calls are not listed)."""
    import keras
    import tensorflow as tf
    from tensorflow.python.framework import op_callbacks

    name, config, shape, dtype = spec
    layer = getattr(keras.layers, name).from_config(json.loads(config))
    x = tf.random.normal(shape, dtype=dtype)
    grads = [tf.ones_like(t) for t in tf.nest.flatten(layer(x))]
    state = _new_state()
    callback = _tf_callback(state)
    op_callbacks.add_op_callback(callback)
    try:
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = tf.nest.flatten(layer(x))
        tape.gradient(out, [x, *layer.trainable_variables], output_gradients=grads)
    finally:
        op_callbacks.remove_op_callback(callback)
    products = Counter()
    for (b, m, k, n, *_), count in state["products"].items():
        products[2.0 * b * m * k * n] += count
    return {
        "kind": name, "steps": shape[1], "batch": shape[0], "inputs": shape[2],
        "hidden": int(layer.units), "layers": 1, "directions": 1, "backward": True,
        "elem_bytes": tf.as_dtype(dtype).size, "ops": state["ops"],
        "kernels": state["flop_ops"] + state["mem_ops"], "flops": state["flops"],
        "mem_bytes": state["mem_bytes"], "products": sorted([f, c] for f, c in products.items()),
        "elementwise": [],
    }  # fmt: skip


def _keras_rnn_modules(calls: Counter, steps: float) -> tuple:
    """:attr:`StepCounts.rnn_modules` of the Keras LSTM and GRU calls a step made
    (``calls`` over ``steps`` steps), each distinct call counted alone
    (:func:`count_keras_rnn_call`, :func:`~crossover_study.stepmodel.record.rnn_module_rows`)."""
    return rnn_module_rows(calls, steps, count_keras_rnn_call, "Keras {} not counted alone")
