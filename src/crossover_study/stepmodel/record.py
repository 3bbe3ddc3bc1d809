"""What one counted step did (:class:`StepCounts`, per step of the program) and the
closed forms the counters use: FLOPs of a product, of an MLP's products, of an LSTM
layer's gate products (:mod:`crossover_study.stepmodel.counts` says what is counted).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass

#: The fields of a :attr:`StepCounts.rnn_modules` row, in order (``step_rnn_modules``).
RNN_MODULE_KEYS = (
    "kind", "steps", "batch", "inputs", "hidden", "layers", "directions", "backward",
    "elem_bytes", "ops", "kernels", "flops", "mem_bytes", "products", "elementwise",
    "per_step",
)  # fmt: skip


@dataclass(frozen=True)
class StepCounts:
    """Counts of one training step (a call's counts divided by its steps).

    ops: operations per step (dimensionless; see ``ops_kind``).
    ops_kind: ``aten_ops`` (PyTorch, dispatcher), ``cuda_kernels`` (PyTorch on CUDA,
        the profiler's device activities) or ``tf_ops`` (TensorFlow, op callback).
    graph_ops: of ``ops``, those run inside a compiled graph (TensorFlow functions);
        the rest are dispatched one by one from Python. 0 for PyTorch.
    flops: FLOPs of matrix products and LSTM gates, forward and backward (2 per
        multiply-add).
    flops_source: how ``flops`` was counted.
    flops_precision: the precision most of ``flops`` ran in (``fp32``, ``bf16``,
    ``fp16``: the products' input dtype, an autocast region's included); None unknown.
    mem_bytes: bytes read and written by the other operations (bytes).
    copy_bytes: bytes copied between host and device (bytes).
    mem_ops: of ``ops``, those that moved the ``mem_bytes`` (mem_bytes / mem_ops is
        their mean traffic, which sets the bandwidth they get: cache or DRAM).
    flop_ops: the matrix products that make ``flops`` (an LSTM layer op counts its
        gate products, :func:`lstm_products`): flops / flop_ops is their mean size,
        which sets the FLOP rate they get.
    function_calls: calls of traced functions (TensorFlow ``tf.function``, Keras's
        train function) per step, each one eager op besides the ops it runs; 0 for
        PyTorch.
    products: the step's matrix products by shape, ``((batch, m, k, n, trans_a,
        trans_b, in_graph, per_step), ...)``: ``per_step`` products of (m × k)·(k × n),
        ``batch`` of them at once, an operand stored transposed where its flag is set
        (the layout changes the speed), run inside a compiled TensorFlow graph where
        ``in_graph`` is set (a graph may run a product on other kernels than eager
        mode); what :func:`crossover_study.stepmodel.replay.replay_products`
        times one shape at a time. Products whose shapes are not known (a convolution,
        attention, a dimension unknown at trace time) are in ``flops`` but not here,
        nor are an LSTM layer op's gate products (they are in ``rnn_layers``).
    rnn_layers: the step's LSTM layers as PyTorch ran them (one oneDNN
        ``mkldnn_rnn_layer`` op per layer on the CPU; a cuDNN ``_cudnn_rnn`` op's
        layers one by one), ``((steps, batch, inputs, hidden, backward, per_step),
        ...)``: ``per_step`` forward (``backward`` false) or backward passes of a layer
        of ``hidden`` units over ``steps`` time steps of ``batch`` sequences of
        ``inputs`` features, which
        :func:`crossover_study.stepmodel.replay.replay_products` times whole. Their FLOPs
        (:func:`lstm_layer_flops`) are in ``flops``.
    rnn_modules: the step's ``torch.nn.RNN``/``GRU``/``LSTM`` module calls (PyTorch on
        the CPU) or Keras ``LSTM``/``GRU`` calls that Keras would run on cuDNN on a GPU
        (TensorFlow), one row per distinct call, its fields in :data:`RNN_MODULE_KEYS`'s
        order: ``kind`` (``RNN_TANH``, ``RNN_RELU``, ``GRU``, ``LSTM``), ``steps`` T,
        ``batch`` B, ``inputs`` I, ``hidden`` H, ``layers``, ``directions`` (1 or 2),
        ``backward`` (its backward pass taken), ``elem_bytes`` (bytes per element), and
        what one such call accounts for among this record's counts, forward and
        backward: ``ops``, ``kernels`` (products and element-wise calls), ``flops``,
        ``mem_bytes`` (bytes), ``products`` (JSON text ``[[FLOPs, calls], ...]``) and
        ``elementwise`` (JSON text ``[[bytes, calls], ...]``); ``per_step`` calls per
        step (:func:`crossover_study.stepmodel.counts_torch.count_rnn_call`,
        :func:`crossover_study.stepmodel.counts_tf.count_keras_rnn_call`). On the CPU a
        GRU or RNN layer runs as ATen ops per time step, an LSTM layer as one oneDNN op,
        a Keras layer as a loop of ops per time step; a device card prices these calls as
        cuDNN runs them instead.
    elementwise: PyTorch's operations behind ``mem_bytes`` by operator and arguments,
        ``((op, args, bytes, per_step), ...)``: ``per_step`` calls of ``op`` (an ATen
        overload, e.g. ``aten._softmax.default``) with ``args`` (JSON of its positional
        and keyword arguments, each tensor ``{"t": shape, "dtype": name}``; see
        :func:`encode_args`), each moving ``bytes``; what
        :func:`crossover_study.stepmodel.replay.replay_elementwise` times one call at a time.
        An operation whose arguments cannot be written so (a random generator) is in
        ``mem_bytes`` but not here.
    """

    ops: float
    ops_kind: str
    graph_ops: float
    flops: float | None
    flops_source: str
    mem_bytes: float | None
    copy_bytes: float
    function_calls: float = 0.0
    mem_ops: float | None = None
    flop_ops: float | None = None
    products: tuple = ()
    rnn_layers: tuple = ()
    elementwise: tuple = ()
    flops_precision: str | None = None
    rnn_modules: tuple = ()

    def columns(self) -> dict:
        """The timings table's columns (``step_ops``, ``step_ops_kind``, ...);
        ``step_products`` as JSON ``[[batch, m, k, n, trans_a, trans_b, in_graph,
        per_step], ...]`` and ``step_rnn_layers`` as JSON ``[[steps, batch, inputs,
        hidden, backward, per_step], ...]`` and ``step_elementwise`` as JSON ``[[op,
        args, bytes, per_step], ...]`` and ``step_rnn_modules`` as JSON ``[[kind, steps,
        ..., per_step], ...]`` (:data:`RNN_MODULE_KEYS`; each None when empty)."""
        columns = {f"step_{name}": value for name, value in asdict(self).items()}
        for name in ("products", "rnn_layers", "elementwise", "rnn_modules"):
            rows = [list(row) for row in getattr(self, name)]
            columns[f"step_{name}"] = json.dumps(rows) if rows else None
        return columns


def rnn_module_rows(calls, steps: float, count_alone, label: str) -> tuple:
    """:attr:`StepCounts.rnn_modules` of the recurrent calls a step made (``calls``: a
    Counter of a call's spec -> its calls in ``steps`` steps): each distinct call counted
    once alone by ``count_alone(spec)`` (a dict of :data:`RNN_MODULE_KEYS` but
    ``per_step``) with its ``per_step``, as a row of :data:`RNN_MODULE_KEYS`, its
    ``products`` and ``elementwise`` as JSON text (a cell of ``rnn_modules.csv``). A call
    that cannot be counted alone is left out with a line on stderr naming it (``label``
    formats its spec's kind, e.g. ``"Keras {} not counted alone"``): its ops are then
    priced as counted."""
    rows = []
    for spec, count in calls.items():
        try:
            counted = {**count_alone(spec), "per_step": count / steps}
        except Exception as error:  # noqa: BLE001 - the step's own counts stay
            print(f"step counts: {label.format(spec[0])}: {error}", file=sys.stderr)
            continue
        for key in ("products", "elementwise"):
            counted[key] = json.dumps(counted[key])
        rows.append(tuple(counted[k] for k in RNN_MODULE_KEYS))
    return tuple(rows)


def rows_per_step(counts: Counter, steps: float, *flags) -> tuple:
    """``counts`` (a Counter of a shape key, e.g. (batch, m, k, n, trans_a, trans_b),
    -> its calls in ``steps`` steps) as rows ``(*key, *flags, per_step)``, sorted:
    :attr:`StepCounts.products` with its ``in_graph`` flag, or
    :attr:`StepCounts.rnn_layers`."""
    rows = sorted(counts.items())
    # Above a millionth per step: a windowed count less a whole call's leaves rounding.
    return tuple((*key, *flags, count / steps) for key, count in rows if count / steps > 1e-6)


def mlp_matmul_flops(batch: int, d_in: int, hidden: int, d_out: int = 8) -> int:
    """FLOPs of the matrix products of one s001-mlp training step (dimensionless count,
    2 per multiply-add): x (batch × d_in) · w1 (d_in × hidden), · w2 (hidden × d_out),
    · w3 (d_out × d_out) forward; backward the gradients of w3, w2 and w1 and of the two
    hidden activations (h2 through w3, h1 through w2), none for the input x:

        2·N·(D·H + H·O + O²)  +  2·N·(O² + O²  +  H·O + H·O  +  D·H)
        = 2·N·(2·D·H + 3·H·O + 3·O²)

    with N = ``batch``, D = ``d_in``, H = ``hidden``, O = ``d_out`` (8 in the seed).
    Source: a product of (m × k) and (k × n) costs 2·m·k·n FLOPs; the backward of
    y = a·b needs a^T·dy and dy·b^T, each as costly as the forward product.
    Raises ValueError for a size below 1.
    """
    sizes = {"batch": batch, "d_in": d_in, "hidden": hidden, "d_out": d_out}
    for name, value in sizes.items():
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    n, d, h, o = (int(v) for v in sizes.values())
    return 2 * n * (2 * d * h + 3 * h * o + 3 * o * o)


def lstm_products(steps: int, batch: int, layers, backward: bool) -> Counter:
    """The gate products of LSTM layers over a sequence, as oneDNN and cuDNN run them
    (oneDNN's RNN primitive: one "layer" GEMM of the input over all time steps, one
    "iteration" GEMM of the hidden state per step; the weight gradients over all
    steps at once): ``layers`` is one (inputs I, hidden units H) pair per layer (its
    input-to-gates matrix is 4H × I, its hidden-to-gates one 4H × H), ``steps`` = T,
    ``batch`` = B.

    Forward, per layer: (T·B × I)·(I × 4H) once and (B × H)·(H × 4H) T times;
    2·T·B·4H·(I + H) FLOPs (the LSTM equations: Hochreiter and Schmidhuber 1997;
    torch.nn.LSTM's documentation). Backward: the input gradient (T·B × 4H)·(4H × I),
    the weight gradients (4H × T·B)·(T·B × I) and (4H × T·B)·(T·B × H), and the hidden
    state's gradient (B × 4H)·(4H × H) T times: twice the forward FLOPs. Biases and the
    element-wise gate arithmetic are not products. Returns a Counter of (batch, m, k,
    n, trans_a, trans_b) -> products."""
    products = Counter()
    rows = steps * batch
    for inputs, hidden in layers:
        gates = 4 * hidden
        if not backward:
            products[(1, rows, inputs, gates, False, True)] += 1
            products[(1, batch, hidden, gates, False, True)] += steps
        else:
            products[(1, rows, gates, inputs, False, False)] += 1
            products[(1, gates, rows, inputs, True, False)] += 1
            products[(1, gates, rows, hidden, True, False)] += 1
            products[(1, batch, gates, hidden, False, False)] += steps
    return products


def lstm_layer_flops(steps: int, batch: int, inputs: int, hidden: int, backward: bool) -> float:
    """FLOPs of one LSTM layer's forward (``backward`` false) or backward pass over
    ``steps`` time steps of ``batch`` sequences: its gate products
    (:func:`lstm_products`), 2·T·B·4H·(I + H) forward, twice that backward."""
    return product_flops(lstm_products(steps, batch, [(inputs, hidden)], backward))


def product_flops(products) -> float:
    """FLOPs of ``products`` (a Counter of (batch, m, k, n, ...) -> count, or
    :attr:`StepCounts.products` rows ending in their count): 2·batch·m·k·n each
    (2 FLOPs per multiply-add)."""
    rows = products.items() if isinstance(products, dict) else ((p[:4], p[-1]) for p in products)
    return sum(2.0 * b * m * k * n * count for (b, m, k, n, *_), count in rows)
