"""What one device costs per unit of work: the rates of the step-time model
(:mod:`crossover_study.stepmodel.model`).

Measured once per study for each (framework, device, threads) by the rates job
(:mod:`crossover_study.measure.rates_job`, the workflow's ``rates`` rule), in its own process
pinned to the threads of that device class's measuring jobs, after the device is
initialised; each rate is the median over blocks with the blocks' interquartile range
(its spread). Every row of the measuring jobs carries their medians
(:func:`row_columns`):

- ``eager_op_s``: seconds per operation of a minimal training step dispatched from
  Python (:data:`DEPTH` tanh layers of width 1: forward, loss, gradients, SGD update),
  the step's time divided by its operations as :mod:`crossover_study.stepmodel.counts`
  counts them. Not a bare ``add``: an operation of a training step also pays autograd's
  bookkeeping and the Python around it, which a lone ``torch.add`` does not (1.9 µs for
  ``torch.add`` against about 5 to 9 µs per op of the seeds' torch steps on the 2-core
  VM, 2026-12-02).
- ``graph_op_s`` and ``function_call_s`` (TensorFlow): the same step inside one
  ``tf.function`` at :data:`DEPTH` and :data:`DEEP` layers; the slope of its time
  against its ops is the cost of an op inside a graph, the intercept that of the call.
- ``fit_call_s``, ``fit_epoch_s``, ``fit_iterator_s``, ``fit_validation_s`` and
  ``fit_step_s`` (TensorFlow): Keras ``fit``'s own cost per call, per epoch, per data
  iterator, per validated epoch and per step, from minimal fits at 1 and
  :data:`FIT_ROWS` steps and at 1 and :data:`FIT_EPOCHS` epochs, with a new iterator
  each epoch and with one kept (:func:`keras_fit_rates`).
- ``flop_per_s``: the achieved FLOP/s of dense matrix products in the job's float
  precision (square products of :data:`MATMUL_SIZE` for the device class,
  2·n³ FLOPs each), and ``flop_curve``: the same at the sides :data:`CURVE_SIDES`, net
  of a 1 × 1 product's dispatch, at which the model prices a step's products by their
  mean size.
- ``mem_curve`` and ``mem_bytes_per_s``: bytes per second of element-wise additions
  that allocate their output, from 16 KiB to 64 MiB per tensor (two inputs read, one
  output written: 3 × 4 bytes per element, the STREAM "add" kernel's count; J.
  McCalpin, STREAM, 1995), net of the addition's dispatch; small tensors stay in cache
  and move faster than DRAM allows, so the model prices a step's element-wise traffic
  at the bandwidth of its mean size (a cache-aware roofline: A. Ilic, F. Pratas, L.
  Sousa, IEEE CAL 13(1), 2014). ``mem_bytes_per_s`` is the largest size's.
- ``mem_dram_bytes_per_s``: the same addition with its operands out of cache, taken in
  turn from a pool far larger than the last-level cache (:func:`_mem_dram`): the
  classic roofline's memory roof, DRAM bandwidth (STREAM's rule that arrays exceed the
  caches), above which the model never prices a step's element-wise traffic.
- ``copy_bytes_per_s`` (accelerators): host-to-device bytes per second of one copy of
  :data:`STREAM_ELEMENTS` float32 from pageable host memory.
- ``page_fault_s``: seconds per minor page fault as the framework's ops take them
  (:func:`page_fault`), which prices the fresh pages a step's allocations fault in
  (the timings table's ``step_page_faults``).

Everything is synchronised before each clock read (the device's own sync). The timing
of blocks and the op-cost timers are :mod:`crossover_study.stepmodel.timing`'s, the price of
a page fault :mod:`crossover_study.stepmodel.faults`'s, Keras fit's costs
:mod:`crossover_study.stepmodel.fit_rates`'s; a step's shapes replayed on the device are
:mod:`crossover_study.stepmodel.replay`'s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from crossover_study.stepmodel.faults import mapped_pages, numpy_fill, page_fault
from crossover_study.stepmodel.fit_rates import keras_fit_rates
from crossover_study.stepmodel.timing import (
    BLOCKS,
    line_through,
    op_cost_timer,
    per_second,
    rates_stack,
    repeated,
    tf_device,
    tf_reader,
    timed_blocks,
    torch_sync,
)

#: Side of the square float32 matrix product that measures ``flop_per_s``, per device
#: class: large enough to be compute-bound there, small enough to take well under 1 s.
MATMUL_SIZE = {"cpu": 512, "cuda": 8192, "cuda_multi": 8192, "tpu": 8192}

#: Elements (float32) of the element-wise and copy measurements: 64 MiB, larger than
#: any CPU cache.
STREAM_ELEMENTS = 2**24


#: Hidden layers of the minimal training step (width 1, tanh): few enough that its
#: arithmetic is nothing, enough that its operations mix forward, backward and update
#: as a real step's do. A one-layer step with torch.autograd.grad cost 10.4 µs per op,
#: this one 6.5 µs, s000-hjb's and s001-mlp's steps about 5 to 8 µs per op once their
#: arithmetic is taken off (2-core VM, 2026-12-02).
DEPTH = 3

#: Layers of the deeper graph whose extra operations give the per-op cost inside a
#: graph (the slope between DEPTH and DEEP layers; the intercept is the call's cost).
#: Deep enough that the extra ops' time stands well above the call's scatter: at 12
#: layers (72 more ops, some 90 µs) the slope came out at 0.09 µs per op in one job of
#: the default study, and s000-hjb's TensorFlow steps were predicted at 0.4 of their
#: time; timed together on the 2-core VM (2026-12-02), 3, 12 and 48 layers took
#: 425 ± 92, 517 ± 60 and 983 ± 444 µs per call (32, 104 and 392 ops): 1.55 µs per
#: graph op between 3 and 48.
DEEP = 48


#: Elements (float32) of the element-wise additions that measure the bandwidth curve:
#: 16 KiB to 64 MiB per tensor, from cache-resident activations to a large layer's
#: weights. A step's element-wise op gets the bandwidth of its mean traffic.
CURVE_ELEMENTS = (2**12, 2**15, 2**18, 2**21, STREAM_ELEMENTS)

#: Additions chained in one TensorFlow graph call when measuring the curve.
CHAIN = 20


def _net_curve(make, sync, per_call: int, sizes, amount) -> tuple[list, list, dict]:
    """One op's rate at each of ``sizes``, net of its cost at size 1 (its dispatch,
    which the ops term prices), so that the curve measures the work alone:
    ``make(size)`` returns ``run(n)``, n calls of ``per_call`` ops; ``amount(size)`` is
    the work per op (bytes or FLOPs). Returns (work per op, work per second) for the
    sizes whose work took at least a fifth of the op's time, and the largest size's
    rate as ``{"median", "iqr", "blocks"}``. Hand-rolled: a timeit of one op at a few
    sizes, minus the floor, is all it is."""
    floor = timed_blocks(make(1), sync, per_call, 50)["median"]
    per_op, rate, largest = [], [], {}
    for size in sizes:
        work = amount(size)
        calls = min(2000, max(3, int(2e8 / (work * per_call))))
        timed = timed_blocks(make(size), sync, per_call, calls)
        net = max(timed["median"] - floor, 1e-12)
        if net > 0.2 * timed["median"]:
            per_op.append(work)
            rate.append(work / net)
        largest = {"median": work / net, "iqr": timed["iqr"] * work / net**2, "blocks": BLOCKS}
    return per_op, rate, largest


def _mem_curve(adds, sync, per_call: int = 1) -> dict:
    """Bytes per second of an element-wise addition that allocates its output, as a
    step's operations do, at each size of :data:`CURVE_ELEMENTS` (12 bytes per element:
    two inputs read, one output written; STREAM's "add"), net of the addition's
    dispatch (:func:`_net_curve`). ``adds(elements)`` returns ``run(n)``. Returns
    ``mem_bytes_per_s`` (the largest size: DRAM) and ``mem_curve`` ({"bytes_per_op":
    [...], "bytes_per_s": [...]})."""
    per_op, rate, largest = _net_curve(adds, sync, per_call, CURVE_ELEMENTS, lambda n: 12.0 * n)
    curve = {"bytes_per_op": per_op, "bytes_per_s": rate}
    return {"mem_bytes_per_s": {**largest, "unit": "B/s"}, "mem_curve": curve}


#: Bytes of the operand pool of :func:`_mem_dram`: 16 times the 32 MiB last-level cache
#: of the 2-core VM's EPYC and several times a GPU's L2 (50 MB on an H100), so that each
#: addition reads operands last touched some 500 MiB of traffic earlier.
DRAM_POOL_BYTES = 2**29

#: Elements (float32) of each operand of :func:`_mem_dram`: 8 MiB, large enough that
#: the dispatch is well under 1 % of an addition's time and below glibc's 32 MiB
#: largest mmap threshold, so that outputs reuse freed memory instead of faulting in new
#: pages (the curve's largest size, 64 MiB, times page faults as well on the CPU).
DRAM_ELEMENTS = 2**21


#: Operand pairs of :func:`_mem_dram`'s pool: :data:`DRAM_POOL_BYTES` over the 8 bytes
#: per element of a float32 pair.
DRAM_PAIRS = DRAM_POOL_BYTES // (8 * DRAM_ELEMENTS)


def _mem_dram(
    make_pair: Callable[[], tuple], add: Callable[[tuple], object], sync: Callable[[], None]
) -> dict:
    """Bytes per second of element-wise additions (12 bytes per element, STREAM's
    "add") whose operands are out of cache: a pool of :data:`DRAM_PAIRS` pairs
    (``make_pair()``: two float32 tensors of :data:`DRAM_ELEMENTS` elements,
    :data:`DRAM_POOL_BYTES` in all) is built, each block adds every pair in turn
    (``add(pair)``) once per pass, and the pool is released before returning so that
    the job's points do not run beside it. Not net of the dispatch (under 1 % at this
    size). Returns ``{"mem_dram_bytes_per_s": {"median", "iqr", "blocks", "unit"}}``.

    Why: the bandwidth curve (:func:`_mem_curve`) reuses one pair, which stays in cache
    up to the last-level cache's size, and so priced a step's element-wise traffic at
    cache speed even where the step's tensors together are far larger than the cache:
    s001-mlp at D_in 4096, H 2048 (339 MB per step) at 136 GB/s, 2.5 ms of a 39 ms
    step. On the 2-core VM (2026-12-04) additions reading a rotating
    pool ran at 33 to 44 GB/s from 0.8 to 200 MB per op, the same additions on one
    reused pair at 55 to 147 GB/s below 32 MiB. Hand-rolled: a pass over a pool, timed,
    is all it is."""
    pool = [make_pair() for _ in range(DRAM_PAIRS)]

    def passes(n: int) -> None:
        for _ in range(n):
            for pair in pool:
                add(pair)

    try:
        rate = timed_blocks(passes, sync, 12.0 * DRAM_ELEMENTS * DRAM_PAIRS, 1)
    finally:
        pool.clear()  # the 512 MiB back before the job measures its points
    return {"mem_dram_bytes_per_s": per_second(rate, "B/s")}


#: Sides of the square float32 products of the FLOP-rate curve: a step's products are
#: mostly small (s000-hjb's 100 x 8 x 8), and a small product runs far below the
#: large one's rate.
CURVE_SIDES = (16, 32, 64, 128, 256, 512)


def _flop_curve(products, sync, per_call: int = 1) -> dict:
    """FLOP/s of square products at each side of :data:`CURVE_SIDES` (2·n³ FLOPs each;
    the output allocated), net of a 1 × 1 product's dispatch (:func:`_net_curve`).
    ``products(side)`` returns ``run(n)``. Returns ``flop_curve`` ({"flops_per_op":
    [...], "flop_per_s": [...]})."""
    per_op, rate, _ = _net_curve(products, sync, per_call, CURVE_SIDES, lambda n: 2.0 * n**3)
    return {"flop_curve": {"flops_per_op": per_op, "flop_per_s": rate}}


def _torch_op_costs(device: str) -> Callable[[float], dict]:
    """``measure(share)`` timing PyTorch's ``eager_op_s`` on ``device``: the minimal
    training step (:data:`DEPTH` layers, SGD) built and counted once, timed in blocks
    of ``share`` × 200 steps."""
    import torch

    from crossover_study.stepmodel.counts_torch import count_torch_step

    target, sync = torch_sync(device)
    layers = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(1, 1), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers).to(target)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.ones(1, 1, device=target), torch.zeros(1, 1, device=target)

    def step(n: int = 1) -> None:
        for _ in range(n):
            optimizer.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()

    step(5)  # lazy initialisation (optimizer state, autograd) before counting and timing
    ops = count_torch_step(step, 1, target).ops

    def measure(share: float = 1.0) -> dict:
        return {"eager_op_s": timed_blocks(step, sync, ops, max(1, round(200 * share)))}

    return measure


def _torch_rates(device: str) -> dict:
    import torch

    target, sync = torch_sync(device)
    rates = op_costs("torch", device)()
    size = MATMUL_SIZE.get(device, 512)
    a = torch.randn(size, size, device=target)
    rates["flop_per_s"] = per_second(
        timed_blocks(repeated(lambda: a @ a), sync, 2.0 * size**3, 3), "FLOP/s"
    )

    def products(side: int):
        m = torch.randn(side, side, device=target)
        return repeated(lambda: m @ m)

    rates.update(_flop_curve(products, sync))

    def adds(elements: int):
        a, b = torch.ones(elements, device=target), torch.ones(elements, device=target)
        return repeated(lambda: torch.add(a, b))

    rates.update(_mem_curve(adds, sync))

    def pair() -> tuple:
        return torch.ones(DRAM_ELEMENTS, device=target), torch.ones(DRAM_ELEMENTS, device=target)

    rates.update(_mem_dram(pair, lambda p: torch.add(*p), sync))
    # Host memory, written by the job's threads: a step's faults are the host's on any
    # device.
    rates.update(
        page_fault(*mapped_pages(lambda r: torch.frombuffer(r, dtype=torch.float32).fill_(1)))
    )
    if target == "cuda":
        host = torch.ones(STREAM_ELEMENTS)
        copy = repeated(lambda: host.to(target))
        rates["copy_bytes_per_s"] = per_second(
            timed_blocks(copy, sync, 4.0 * STREAM_ELEMENTS, 3), "B/s"
        )
    return rates


def _tf_chain_step(tf, depth: int):
    """A TensorFlow training step of ``depth`` tanh layers of width 1 (GradientTape,
    SGD by assign_sub) and a function reading its first weight back (the sync)."""
    weights = [tf.Variable(tf.fill((1, 1), 0.1)) for _ in range(depth)]
    x = tf.ones((1, 1))

    def step() -> None:
        with tf.GradientTape() as tape:
            h = x
            for w in weights:
                h = tf.tanh(h @ w)
            loss = tf.reduce_mean(h**2)
        for w, g in zip(weights, tape.gradient(loss, weights), strict=True):
            w.assign_sub(0.01 * g)

    return step, lambda: weights[0].numpy()


def _tf_chain(tf, box: dict, first, op):
    """``run(n)`` for the curves: n calls of one ``tf.function`` applying ``op`` to
    ``first`` :data:`CHAIN` times in a row (each op's output the next one's input), the
    last result kept in ``box["y"]`` for the sync. Chained inside a graph: the eager
    call's cost (tens of µs) would otherwise swamp a small op's work."""

    @tf.function
    def chain():
        y = first
        for _ in range(CHAIN):
            y = op(y)
        return y

    def run(n: int) -> None:
        for _ in range(n):
            box["y"] = chain()

    return run


def _tf_op_costs(device: str) -> Callable[[float], dict]:
    """``measure(share)`` timing TensorFlow's ``eager_op_s``, ``graph_op_s`` and
    ``function_call_s`` on ``device``: the minimal step eager (blocks of ``share`` × 50
    steps) and inside a ``tf.function`` at :data:`DEPTH` and :data:`DEEP` layers
    (blocks of ``share`` × 100 calls; the slope of their time against their ops is the
    cost of an op inside a graph, the intercept that of the call), built, counted and
    traced once."""
    import tensorflow as tf

    from crossover_study.stepmodel.counts_tf import count_tf_step

    name = tf_device(device)
    with tf.device(name):
        one, sync = _tf_chain_step(tf, DEPTH)
        eager_ops = count_tf_step(one).ops
        graphs = {}
        for depth in (DEPTH, DEEP):
            chain, chain_sync = _tf_chain_step(tf, depth)
            graph = tf.function(chain)
            graphs[depth] = (count_tf_step(graph).ops, graph, chain_sync)

    def measure(share: float = 1.0) -> dict:
        with tf.device(name):
            calls = max(1, round(50 * share))
            rates = {"eager_op_s": timed_blocks(repeated(one), sync, eager_ops, calls)}
            # Inside a graph: per call = call + ops x per-op; two depths give both.
            per_call = {
                depth: (
                    ops,
                    timed_blocks(repeated(graph), graph_sync, 1.0, max(1, round(100 * share))),
                )
                for depth, (ops, graph, graph_sync) in graphs.items()
            }
        rates["graph_op_s"], rates["function_call_s"] = line_through(
            *per_call[DEPTH], *per_call[DEEP], min_slope=1e-9
        )
        return rates

    return measure


def op_costs(framework: str, device: str) -> Callable[[float], dict]:
    """``measure(share=1.0)``: the per-operation rates of ``framework`` on ``device``
    (``eager_op_s``; TensorFlow also ``graph_op_s`` and ``function_call_s``), each
    ``{"median", "iqr", "blocks"}`` in seconds per op or per call, timed afresh at each
    call, in blocks ``share`` times as long as the job's. Its minimal steps are built
    the first time and kept for the process. Exceptions from the framework propagate."""
    build = _torch_op_costs if framework == "torch" else _tf_op_costs
    return op_cost_timer((framework, device), lambda: build(device))


def _tf_rates(device: str) -> dict:
    import tensorflow as tf

    rates = op_costs("tensorflow", device)()
    with tf.device(tf_device(device)):
        rates.update(keras_fit_rates())
        size = MATMUL_SIZE.get(device, 512)
        m = tf.random.normal((size, size))
        box = {}

        def matmuls(n: int) -> None:
            for _ in range(n):
                box["y"] = m @ m

        sync_y = tf_reader(tf, box)

        rates["flop_per_s"] = per_second(timed_blocks(matmuls, sync_y, 2.0 * size**3, 3), "FLOP/s")

        def products(side: int):
            q = tf.eye(side)
            return _tf_chain(tf, box, q, lambda y: y @ q)

        rates.update(_flop_curve(products, sync_y, per_call=CHAIN))

        def adds(elements: int):
            # Products, not sums: Grappler rewrites a chain of adds into one AddN.
            b = tf.fill((elements,), 1.0001)
            return _tf_chain(tf, box, tf.ones(elements), lambda y: y * b)

        rates.update(_mem_curve(adds, sync_y, per_call=CHAIN))

        def add(pair: tuple) -> None:
            box["y"] = tf.add(*pair)  # eager: one addition per call, nothing to rewrite

        rates.update(
            _mem_dram(lambda: (tf.ones(DRAM_ELEMENTS), tf.ones(DRAM_ELEMENTS)), add, sync_y)
        )
    rates.update(page_fault(*mapped_pages(numpy_fill)))
    return rates


def measure_rates(framework: str, device: str) -> dict:
    """The rates (module docstring) for ``framework`` (``torch`` or
    ``tensorflow``) on ``device``, as ``{name: {"median", "iqr", "blocks"[, "unit"]}}``
    (``*_op_s`` in seconds per operation, ``flop_per_s`` in FLOP/s, ``*_bytes_per_s``
    in bytes per second), plus ``"seconds"``: how long measuring them took. Call it
    after the framework is imported and the device initialised. Exceptions from the
    framework propagate (the runner records none then)."""
    started = time.perf_counter()
    with rates_stack(framework):  # TensorFlow's from the step's shallow stack
        rates = _torch_rates(device) if framework == "torch" else _tf_rates(device)
    return {**rates, "seconds": time.perf_counter() - started}


#: Rate names and the timings table's column each one's median goes to.
RATE_COLUMNS = {
    "eager_op_s": "rate_eager_op_s",
    "graph_op_s": "rate_graph_op_s",
    "function_call_s": "rate_function_call_s",
    "fit_call_s": "rate_fit_call_s",
    "fit_step_s": "rate_fit_step_s",
    "fit_epoch_s": "rate_fit_epoch_s",
    "fit_iterator_s": "rate_fit_iterator_s",
    "fit_validation_s": "rate_fit_validation_s",
    "flop_per_s": "rate_flop_per_s",
    "mem_bytes_per_s": "rate_mem_bytes_per_s",
    "mem_dram_bytes_per_s": "rate_mem_dram_bytes_per_s",
    "copy_bytes_per_s": "rate_copy_bytes_per_s",
    "page_fault_s": "rate_page_fault_s",
}


#: The timings table's curve columns: each one's rate name and its two lists.
CURVE_COLUMNS = {
    "rate_mem_curve": ("mem_curve", "bytes_per_op", "bytes_per_s"),
    "rate_flop_curve": ("flop_curve", "flops_per_op", "flop_per_s"),
}


def row_columns(rates: dict | None) -> dict:
    """The ``rate_*`` columns of every row of a job from :func:`measure_rates`' result
    (medians; None for a rate not measured or without rates), and the curves as JSON
    ``rate_mem_curve`` ``[[bytes per op, bytes/s], ...]`` and ``rate_flop_curve``
    ``[[FLOPs per product, FLOP/s], ...]`` (None without one)."""
    rates = rates or {}
    columns = {
        column: (rates.get(name) or {}).get("median") for name, column in RATE_COLUMNS.items()
    }
    for column, (name, per_op, rate) in CURVE_COLUMNS.items():
        curve = rates.get(name) or {}
        pairs = list(zip(curve.get(per_op, []), curve.get(rate, []), strict=True))
        columns[column] = json.dumps(pairs) if pairs else None
    return columns
