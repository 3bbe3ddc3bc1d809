"""What one device costs per unit of work: the rates of the step-time model
(:mod:`crossover_study.step_model`).

Measured once per study for each (framework, device, threads) by the rates job
(:mod:`crossover_study.rates_job`, the workflow's ``rates`` rule), in its own process
pinned to the threads of that device class's measuring jobs, after the device is
initialised; each rate is the median over blocks with the blocks' interquartile range
(its spread). Every row of the measuring jobs carries their medians
(:func:`row_columns`):

- ``eager_op_s``: seconds per operation of a minimal training step dispatched from
  Python (:data:`DEPTH` tanh layers of width 1: forward, loss, gradients, SGD update),
  the step's time divided by its operations as :mod:`crossover_study.step_counts`
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
  each epoch and with one kept (:func:`_keras_fit_rates`).
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
  (:func:`_page_fault`), which prices the fresh pages a step's allocations fault in
  (the timings table's ``step_page_faults``).

Everything is synchronised before each clock read (the device's own sync).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable

#: Side of the square float32 matrix product that measures ``flop_per_s``, per device
#: class: large enough to be compute-bound there, small enough to take well under 1 s.
MATMUL_SIZE = {"cpu": 512, "cuda": 8192, "cuda_multi": 8192, "tpu": 8192}

#: Elements (float32) of the element-wise and copy measurements: 64 MiB, larger than
#: any CPU cache.
STREAM_ELEMENTS = 2**24

#: Timed blocks per rate (median and IQR over them).
BLOCKS = 5


def _blocks(run: Callable[[int], None], sync: Callable[[], None], units: float, n: int) -> dict:
    """Time ``BLOCKS`` blocks of ``run(n)`` (synchronised) after one untimed block;
    ``units`` per call of the work (seconds per unit: ``per``). Returns
    ``{"median": s, "iqr": s, "blocks": BLOCKS}`` in seconds per unit."""
    run(n)
    sync()
    per = []
    for _ in range(BLOCKS):
        start = time.perf_counter()
        run(n)
        sync()
        per.append((time.perf_counter() - start) / (n * units))
    q = statistics.quantiles(per, n=4)
    return {"median": statistics.median(per), "iqr": q[2] - q[0], "blocks": BLOCKS}


def _repeat(call: Callable[[], object]) -> Callable[[int], None]:
    """``run(n)`` for :func:`_blocks`: ``call()`` n times, each result dropped at once,
    as a training step drops its temporaries, so that the allocator hands the same
    memory back to the next call. Keeping every result until the block ends (a list
    comprehension, as the rates did until 2026-12-02) makes each call's output fresh
    memory, and the curve then times page faults: PyTorch's element-wise additions
    measured 6.8 GB/s at 393 KB and 6.3 GB/s at 3.1 MB per op that way, 47 and 97 GB/s
    with each output dropped (2-core VM, 2026-12-02), so the model priced s001-mlp's
    element-wise traffic several times too high (its CPU steps predicted at 1.3 to 2.3
    times the measured time)."""

    def run(n: int) -> None:
        for _ in range(n):
            call()

    return run


def _inverse(rate: dict, units_name: str) -> dict:
    """Seconds per unit turned into units per second (median and IQR of the blocks'
    rates, from :func:`_blocks`' result, approximated by the reciprocal of the median
    and the relative spread)."""
    median = 1.0 / rate["median"]
    return {
        "median": median,
        "iqr": rate["iqr"] / rate["median"] * median,
        "blocks": rate["blocks"],
        "unit": units_name,
    }


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
    floor = _blocks(make(1), sync, per_call, 50)["median"]
    per_op, rate, largest = [], [], {}
    for size in sizes:
        work = amount(size)
        calls = min(2000, max(3, int(2e8 / (work * per_call))))
        timed = _blocks(make(size), sync, per_call, calls)
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
        rate = _blocks(passes, sync, 12.0 * DRAM_ELEMENTS * DRAM_PAIRS, 1)
    finally:
        pool.clear()  # the 512 MiB back before the job measures its points
    return {"mem_dram_bytes_per_s": _inverse(rate, "B/s")}


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


def _torch_sync(device: str) -> tuple[str, Callable[[], None]]:
    """``(target, sync)``: torch's device name for ``device`` (``cuda`` or ``cpu``) and
    the wait for its queued work (``torch.cuda.synchronize`` on CUDA, nothing on the
    CPU, whose ops return when done)."""
    import torch

    target = "cuda" if device.startswith("cuda") else "cpu"

    def sync() -> None:
        if target == "cuda":
            torch.cuda.synchronize()

    return target, sync


def _torch_op_costs(device: str) -> Callable[[float], dict]:
    """``measure(share)`` timing PyTorch's ``eager_op_s`` on ``device``: the minimal
    training step (:data:`DEPTH` layers, SGD) built and counted once, timed in blocks
    of ``share`` × 200 steps."""
    import torch

    from crossover_study.step_counts import count_torch_step

    target, sync = _torch_sync(device)
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
        return {"eager_op_s": _blocks(step, sync, ops, max(1, round(200 * share)))}

    return measure


def _torch_rates(device: str) -> dict:
    import torch

    target, sync = _torch_sync(device)
    rates = op_costs("torch", device)()
    size = MATMUL_SIZE.get(device, 512)
    a = torch.randn(size, size, device=target)
    rates["flop_per_s"] = _inverse(
        _blocks(_repeat(lambda: a @ a), sync, 2.0 * size**3, 3), "FLOP/s"
    )

    def products(side: int):
        m = torch.randn(side, side, device=target)
        return _repeat(lambda: m @ m)

    rates.update(_flop_curve(products, sync))

    def adds(elements: int):
        a, b = torch.ones(elements, device=target), torch.ones(elements, device=target)
        return _repeat(lambda: torch.add(a, b))

    rates.update(_mem_curve(adds, sync))

    def pair() -> tuple:
        return torch.ones(DRAM_ELEMENTS, device=target), torch.ones(DRAM_ELEMENTS, device=target)

    rates.update(_mem_dram(pair, lambda p: torch.add(*p), sync))
    # Host memory, written by the job's threads: a step's faults are the host's on any
    # device.
    rates.update(
        _page_fault(*_mapped_pages(lambda r: torch.frombuffer(r, dtype=torch.float32).fill_(1)))
    )
    if target == "cuda":
        host = torch.ones(STREAM_ELEMENTS)
        copy = _repeat(lambda: host.to(target))
        rates["copy_bytes_per_s"] = _inverse(_blocks(copy, sync, 4.0 * STREAM_ELEMENTS, 3), "B/s")
    return rates


def _line(x_a: float, a: dict, x_b: float, b: dict, min_slope: float) -> tuple[dict, dict]:
    """The line through two timings (:func:`_blocks` results ``a`` and ``b``, seconds
    per call at ``x_a`` and ``x_b`` units of work per call): its slope (seconds per
    unit, at least ``min_slope``) and its intercept (seconds per call beyond the work,
    at least 0), each as ``{"median", "iqr", "blocks"}``; the slope's spread is the two
    IQRs over the distance between the points, the intercept's the first point's IQR."""
    slope = max((b["median"] - a["median"]) / (x_b - x_a), min_slope)
    return (
        {"median": slope, "iqr": (a["iqr"] + b["iqr"]) / (x_b - x_a), "blocks": a["blocks"]},
        {"median": max(a["median"] - x_a * slope, 0.0), "iqr": a["iqr"], "blocks": a["blocks"]},
    )


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


def _tf_device(device: str) -> str:
    """TensorFlow's device name for a device class: the host CPU for ``cpu`` (and
    ``tpu``, whose rates are the host's here), the first GPU otherwise."""
    return {"cpu": "/cpu:0", "tpu": "/cpu:0"}.get(device, "/gpu:0")


def _tf_reader(tf, box: dict) -> Callable[[], None]:
    """TensorFlow's sync for the rates: read one element of the last result kept in
    ``box["y"]`` back to the host (nothing before the first result)."""

    def sync() -> None:
        if "y" in box:
            tf.reshape(box["y"], [-1])[0].numpy()

    return sync


def _tf_op_costs(device: str) -> Callable[[float], dict]:
    """``measure(share)`` timing TensorFlow's ``eager_op_s``, ``graph_op_s`` and
    ``function_call_s`` on ``device``: the minimal step eager (blocks of ``share`` × 50
    steps) and inside a ``tf.function`` at :data:`DEPTH` and :data:`DEEP` layers
    (blocks of ``share`` × 100 calls; the slope of their time against their ops is the
    cost of an op inside a graph, the intercept that of the call), built, counted and
    traced once."""
    import tensorflow as tf

    from crossover_study.step_counts import count_tf_step

    name = _tf_device(device)
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
            rates = {"eager_op_s": _blocks(_repeat(one), sync, eager_ops, calls)}
            # Inside a graph: per call = call + ops x per-op; two depths give both.
            per_call = {
                depth: (ops, _blocks(_repeat(graph), graph_sync, 1.0, max(1, round(100 * share))))
                for depth, (ops, graph, graph_sync) in graphs.items()
            }
        rates["graph_op_s"], rates["function_call_s"] = _line(
            *per_call[DEPTH], *per_call[DEEP], min_slope=1e-9
        )
        return rates

    return measure


#: Each (framework, device)'s op-cost timer already built in this process
#: (:func:`op_costs`), and Keras fit's (:func:`_keras_fit_rates`): their minimal steps
#: and models are built, counted and traced once per process (:func:`_timer`).
_OP_COSTS: dict[tuple[str, str], Callable[[float], dict]] = {}


def _timer(key: tuple[str, str], build: Callable[[], Callable[[float], dict]]):
    """The ``measure(share)`` kept in :data:`_OP_COSTS` under ``key``, ``build()`` the
    first time."""
    if key not in _OP_COSTS:
        _OP_COSTS[key] = build()
    return _OP_COSTS[key]


def op_costs(framework: str, device: str) -> Callable[[float], dict]:
    """``measure(share=1.0)``: the per-operation rates of ``framework`` on ``device``
    (``eager_op_s``; TensorFlow also ``graph_op_s`` and ``function_call_s``), each
    ``{"median", "iqr", "blocks"}`` in seconds per op or per call, timed afresh at each
    call, in blocks ``share`` times as long as the job's. Its minimal steps are built
    the first time and kept for the process. Exceptions from the framework propagate."""
    build = _torch_op_costs if framework == "torch" else _tf_op_costs
    return _timer((framework, device), lambda: build(device))


def _tf_rates(device: str) -> dict:
    import tensorflow as tf

    rates = op_costs("tensorflow", device)()
    with tf.device(_tf_device(device)):
        rates.update(_keras_fit_rates())
        size = MATMUL_SIZE.get(device, 512)
        m = tf.random.normal((size, size))
        box = {}

        def matmuls(n: int) -> None:
            for _ in range(n):
                box["y"] = m @ m

        sync_y = _tf_reader(tf, box)

        rates["flop_per_s"] = _inverse(_blocks(matmuls, sync_y, 2.0 * size**3, 3), "FLOP/s")

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
    rates.update(_page_fault(*_mapped_pages(_numpy_fill)))
    return rates


#: Epochs of the minimal fit calls whose slope is fit's cost per epoch.
FIT_EPOCHS = 4

#: Rows of the minimal fits: one step at batch FIT_ROWS against FIT_ROWS steps at
#: batch 1 give fit's cost per step. Enough steps that their cost stands above the
#: scatter of a fit call: at 8 rows (7 extra steps, some 10 ms) the slope's median came
#: out anywhere from 0 to 3 ms over five measurements in one process, its blocks' IQR
#: 1 to 4 ms (2-core VM, 2026-12-04).
FIT_ROWS = 32


def _keras_fit_rates(share: float = 1.0) -> dict:
    """Keras ``fit``'s own cost, beyond the operations of its train function, per call
    (callbacks, data adapter, the train function's set-up), per epoch (the epoch's
    callbacks and logs), per data iterator (a fresh pass over the data: a new
    ``tf.data`` iterator), per validated epoch (``validation_data``: evaluate's
    iterator, test function and callbacks, each epoch) and per step (its Python loop,
    the logs read back, the train function's call), from fits of a 1-unit Dense model
    over :data:`FIT_ROWS` rows, each line the medians of two fits' blocks:

    - per step: one epoch at 1 step (batch FIT_ROWS) and at FIT_ROWS steps (batch 1);
    - per call and per epoch with a new iterator: 1 and :data:`FIT_EPOCHS` epochs of 1
      step (intercept: the call; slope less a step: epoch and iterator);
    - per epoch on a kept iterator: the same with ``steps_per_epoch=1`` at batch 1,
      whose FIT_ROWS batches last every epoch (slope less a step); the iterator is the
      difference of the two slopes;
    - per validated epoch: the kept-iterator fits with ``validation_data`` (the same
      rows, one batch), the excess of their slope.

    Why the iterator apart: Keras 3's ``EpochIterator`` makes a new iterator every epoch
    unless fit is given ``steps_per_epoch``, when it keeps one until a pass over the
    data's batches is used up; s002-iris's seed gives ``steps_per_epoch=2``, so at
    batch 20 (6 batches) one iterator serves 3 epochs. An iterator cost some 22 ms and
    an epoch besides it some 3 ms; Iris's own fit at batch 20, hidden 32 took 8.1 ms an
    epoch without validation, a 1-unit model fitted the same way 8.6 ms, and fit's epoch
    priced with an iterator each had predicted Iris's steps at 1.3 to 2.1 times their
    time (2-core VM, 2026-12-04). Why per epoch and not only per call: a program that
    calls fit once for many epochs (every fit program here, once per timed block) pays
    the call once and the epoch each epoch.

    Each series in blocks of ``share`` × 2 fits (at least one); the model is built once
    per process (:data:`_OP_COSTS`), so that a second call times fit, not its tracing. Returns ``{"fit_step_s", "fit_call_s", "fit_epoch_s",
    "fit_iterator_s", "fit_validation_s"}``, each ``{"median", "iqr", "blocks"}`` in
    seconds (never below 0). Exceptions from Keras propagate."""
    return _timer(("keras_fit", ""), _keras_fit_timer)(share)


def _keras_fit_timer() -> Callable[[float], dict]:
    """``measure(share)`` of :func:`_keras_fit_rates`, its model built and compiled once."""
    import keras
    import numpy as np

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((FIT_ROWS, 1), "float32"), np.zeros((FIT_ROWS, 1), "float32")
    kept = {"steps_per_epoch": 1}
    validated = {**kept, "validation_data": (x, y), "validation_batch_size": FIT_ROWS}

    def measure(share: float = 1.0) -> dict:
        fits = max(1, round(2 * share))

        def timed(steps: int, epochs: int, **kwargs) -> dict:
            fit = lambda n: [  # noqa: E731
                model.fit(x, y, batch_size=FIT_ROWS // steps, epochs=epochs, verbose=0, **kwargs)
                for _ in range(n)
            ]
            return _blocks(fit, lambda: None, 1.0, fits)

        def less(rate: dict, *others: dict) -> dict:
            rest = rate["median"] - sum(other["median"] for other in others)
            return {**rate, "median": max(rest, 0.0)}

        def epochs(steps: int, **kwargs) -> tuple[dict, dict]:
            return _line(
                1,
                timed(steps, 1, **kwargs),
                FIT_EPOCHS,
                timed(steps, FIT_EPOCHS, **kwargs),
                min_slope=0.0,
            )

        one = timed(1, 1)
        per_step, _ = _line(1, one, FIT_ROWS, timed(FIT_ROWS, 1), min_slope=0.0)
        renewed, per_call = _line(1, one, FIT_EPOCHS, timed(1, FIT_EPOCHS), min_slope=0.0)
        kept_epoch = epochs(FIT_ROWS, **kept)[0]
        validated_epoch = epochs(FIT_ROWS, **validated)[0]
        return {
            "fit_step_s": per_step,
            "fit_call_s": per_call,
            "fit_epoch_s": less(kept_epoch, per_step),
            "fit_iterator_s": less(renewed, kept_epoch),
            "fit_validation_s": less(validated_epoch, kept_epoch),
        }

    return measure


def measure_rates(framework: str, device: str) -> dict:
    """The rates (module docstring) for ``framework`` (``torch`` or
    ``tensorflow``) on ``device``, as ``{name: {"median", "iqr", "blocks"[, "unit"]}}``
    (``*_op_s`` in seconds per operation, ``flop_per_s`` in FLOP/s, ``*_bytes_per_s``
    in bytes per second), plus ``"seconds"``: how long measuring them took. Call it
    after the framework is imported and the device initialised. Exceptions from the
    framework propagate (the runner records none then)."""
    started = time.perf_counter()
    rates = _torch_rates(device) if framework == "torch" else _tf_rates(device)
    return {**rates, "seconds": time.perf_counter() - started}


#: float32 elements of each mapping of :func:`_page_fault` (64 MiB, 16 384 pages): enough
#: that its mmap and munmap are a small part of a call.
FAULT_ELEMENTS = 2**24


def _page_fault(fresh: Callable[[], object], reuse: Callable[[], object]) -> dict:
    """Seconds per minor page fault as the job's framework takes them: ``fresh()``
    writes :data:`FAULT_ELEMENTS` float32 into new memory (faulting in every page),
    ``reuse()`` writes as many into memory it keeps; their difference in time per fault
    that ``fresh()`` took (:data:`BLOCKS` blocks of one call each, after one untimed).
    Returns ``{"page_fault_s": {"median", "iqr", "blocks"}}``; ``{}`` where the fresh
    call faulted in fewer than half its pages or the OS counts no faults
    (:func:`_mapped_pages` makes the calls).

    Why: a PyTorch step that allocates and frees tensors of a MB or more can fault in
    fresh pages at every step (glibc returns the top of its heap to the kernel), and
    the replays, whose outputs reuse the memory just freed, do not: s000-hjb at batch
    10 000, width 128 took 4 645 faults a step, s004-lstm at batch 128 40 848 (default
    study, 2026-12-04). Written by PyTorch's two threads a fault cost 1.3 to 1.4 µs on
    the 2-core VM, one thread 2.1 µs, a one-byte-a-page write from NumPy with the
    mapping's mmap and munmap 3.4 µs; priced at 3.2 µs the faulting points were
    over-predicted (s004-lstm at batch 128: 1.41). Hand-rolled: two timed writes."""
    import mmap

    faults = _faults_per_call(_repeat(fresh), lambda: None)
    if faults < FAULT_ELEMENTS * 4 / mmap.PAGESIZE / 2:
        return {}
    fresh_s = _blocks(_repeat(fresh), lambda: None, faults, 1)
    reuse_s = _blocks(_repeat(reuse), lambda: None, faults, 1)
    return {
        "page_fault_s": {
            "median": max(fresh_s["median"] - reuse_s["median"], 0.0),
            "iqr": fresh_s["iqr"] + reuse_s["iqr"],
            "blocks": BLOCKS,
        }
    }


def _mapped_pages(fill: Callable[[object], None]) -> tuple[Callable[[], None], Callable[[], None]]:
    """``(fresh, reuse)`` for :func:`_page_fault`: ``fill(region)`` writes every float32
    of an anonymous mapping of :data:`FAULT_ELEMENTS` float32 (an ``mmap``), fresh:
    into a new mapping, unmapped afterwards; reuse: into one mapping kept.

    Why a mapping of its own and not the framework's allocation: whether a 64 MiB
    tensor gets fresh pages depends on the process's heap. glibc serves it from a free
    block of its heap where one is large enough, and mmaps fresh pages only where none
    is: torch.ones(2**24) faulted 16 385 times a call in some processes and never in
    others, the same code run four times after the job's rates (2-core VM,
    2026-12-04)."""
    import mmap

    size = FAULT_ELEMENTS * 4
    kept = mmap.mmap(-1, size)

    def fresh() -> None:
        region = mmap.mmap(-1, size)
        fill(region)
        region.close()

    return fresh, lambda: fill(kept)


def _numpy_fill(region) -> None:
    """Fill ``region`` (a buffer) with float32 ones from NumPy, one thread: the page
    writes of :func:`_page_fault` for TensorFlow, whose CPU allocator keeps its large
    blocks (its 64 MiB outputs took 0.05 faults a call on the 2-core VM)."""
    import numpy as np

    np.frombuffer(region, dtype=np.float32).fill(1.0)


#: Calls of a replayed shape after its timed blocks over which
#: :func:`_faults_per_call` counts its page faults.
FAULT_CALLS = 3


def _faults_per_call(run: Callable[[int], None], sync: Callable[[], None]) -> float:
    """Minor page faults per call of ``run(1)`` over :data:`FAULT_CALLS` calls (0
    where the OS counts none): what a replay's calls faulted in, so that the model
    prices only the step's other faults (a product or element-wise call whose output
    is 32 MiB or more is mmapped afresh every call, in the step as in its replay)."""
    from crossover_study.host_load import minor_faults

    before = minor_faults()
    run(FAULT_CALLS)
    sync()
    after = minor_faults()
    return 0.0 if before is None or after is None else (after - before) / FAULT_CALLS


#: FLOPs of work per timed block of :func:`replay_products` (a product's repetitions per
#: block: this over its FLOPs, 1 to :data:`REPLAY_REPS`): about a millisecond on the
#: 2-core VM, so that a small product's block is not all clock reads.
REPLAY_FLOPS = 5e7
REPLAY_REPS = 200

#: Replays already timed in this process (a measuring job is one process), keyed by
#: what was replayed, the framework, the device and the shape or call: a point pays
#: only for the shapes new to its job; one replayed before gives its earlier timing
#: again, so the columns sum the same per-shape seconds (:func:`_replayed`).
_REPLAYED: dict[tuple, object] = {}


def _replayed(key: tuple, replay: Callable[[], object]):
    """``replay()``'s result kept in :data:`_REPLAYED` under ``key``: timed the first
    time a job meets ``key``, reused after. An exception is not kept (it propagates)."""
    if key not in _REPLAYED:
        _REPLAYED[key] = replay()
    return _REPLAYED[key]


def _torch_product_maker(device: str):
    """``(make, sync)`` for :func:`replay_products` in PyTorch on ``device``."""
    import torch

    target, sync = _torch_sync(device)

    def operand(batch: int, rows: int, cols: int, transposed: bool):
        stored = (batch, cols, rows) if transposed else (batch, rows, cols)
        t = torch.randn(*stored, device=target)
        t = t.transpose(-1, -2) if transposed else t
        return t[0] if batch == 1 else t

    def make(batch, m, k, n, trans_a, trans_b):
        a, b = operand(batch, m, k, trans_a), operand(batch, k, n, trans_b)
        return _repeat(lambda: a @ b)

    return make, sync


def _torch_lstm_layer_maker(device: str):
    """``make(steps, batch, inputs, hidden, backward)`` for :func:`replay_rnn_layers`:
    ``run(n)`` (:func:`_blocks`) of a one-layer ``torch.nn.LSTM(inputs, hidden)`` on
    ``device`` over a (steps × batch × inputs) input that needs its gradient (as every
    layer's but the first does in a stack), forward only, or forward and backward
    (``backward``) from a fixed output gradient."""
    import torch

    target = _torch_sync(device)[0]

    def make(steps, batch, inputs, hidden, backward):
        layer = torch.nn.LSTM(inputs, hidden).to(target)
        x = torch.randn(steps, batch, inputs, device=target, requires_grad=True)
        grad = torch.randn(steps, batch, hidden, device=target)
        if backward:
            return _repeat(lambda: layer(x)[0].backward(grad))
        return _repeat(lambda: layer(x))

    return make


def replay_rnn_layers(device: str, layers) -> dict:
    """PyTorch's LSTM layers of a step (:attr:`crossover_study.step_counts.StepCounts.
    rnn_layers`, rows ``(steps, batch, inputs, hidden, backward, per_step)``) timed
    whole on ``device`` with the job's threads: a shape's forward pass is its
    one-layer ``torch.nn.LSTM``'s forward call, its backward pass the forward and
    backward call less the forward (:func:`_torch_lstm_layer_maker`), each the median
    of :data:`BLOCKS` blocks (about :data:`REPLAY_FLOPS` FLOPs each) net of the same
    at one time step, one sequence, one input and one unit (the dispatch of the ops
    around the layer, which the model's ops term prices), never below 0.

    Why whole and not as its gate products: oneDNN's layer also runs the gates'
    element-wise arithmetic and a loop over the time steps, which its products alone
    leave out; s004-lstm's three layers at batch 32, 45 units, 60 time steps took 17 ms
    forward and backward, their gate products replayed alone 11.7 ms (2-core VM,
    2026-12-02).

    Returns ``{"products_s": seconds per step, "products_flops": the FLOPs per step of
    the layers' gate products (:func:`crossover_study.step_counts.lstm_layer_flops`)}``.
    Exceptions from torch propagate. Hand-rolled: a timeit per shape is all it is."""
    from crossover_study.step_counts import lstm_layer_flops

    make = _torch_lstm_layer_maker(device)
    sync = _torch_sync(device)[1]

    def passes(steps, batch, inputs, hidden, reps) -> tuple[float, float]:
        forward = _blocks(make(steps, batch, inputs, hidden, False), sync, 1.0, reps)["median"]
        both = _blocks(make(steps, batch, inputs, hidden, True), sync, 1.0, reps)["median"]
        return forward, max(both - forward, 0.0)

    floor = (
        _replayed(("lstm floor", "torch", device), lambda: passes(1, 1, 1, 1, 50))
        if layers
        else (0.0, 0.0)
    )
    seconds = flops = 0.0
    for steps, batch, inputs, hidden, backward, per_step in layers:
        shape = (steps, batch, inputs, hidden)
        work = lstm_layer_flops(*shape, False) + lstm_layer_flops(*shape, True)
        reps = max(1, min(REPLAY_REPS, int(REPLAY_FLOPS / max(work, 1.0))))
        timed = _replayed(("lstm", "torch", device, shape), lambda s=shape, r=reps: passes(*s, r))
        at = int(bool(backward))
        seconds += per_step * max(timed[at] - floor[at], 0.0)
        flops += per_step * lstm_layer_flops(*shape, bool(backward))
    return {"products_s": seconds, "products_flops": flops}


def _tf_product_maker(device: str):
    """``(make, sync)`` for :func:`replay_products` in TensorFlow on ``device``."""
    import tensorflow as tf

    name = _tf_device(device)
    box = {}
    sync = _tf_reader(tf, box)

    def make(batch, m, k, n, trans_a, trans_b):
        lead = (batch,) if batch > 1 else ()
        with tf.device(name):
            a = tf.random.normal((*lead, *((k, m) if trans_a else (m, k))))
            b = tf.random.normal((*lead, *((n, k) if trans_b else (k, n))))

        def run(reps: int) -> None:
            with tf.device(name):
                for _ in range(reps):
                    box["y"] = tf.linalg.matmul(a, b, transpose_a=trans_a, transpose_b=trans_b)

        return run

    return make, sync


def replay_products(framework: str, device: str, products) -> dict:
    """The step's matrix products timed alone, one shape at a time, on the device and
    with the threads of the job that measured the step: ``products`` is
    :attr:`crossover_study.step_counts.StepCounts.products` (rows ``(batch, m, k, n,
    trans_a, trans_b, in_graph, per_step)``; without ``in_graph``: eager). Each
    eager shape's operands (random, float32, stored transposed where flagged) are
    multiplied in :data:`BLOCKS` blocks (:func:`_blocks`, about :data:`REPLAY_FLOPS`
    FLOPs each); its time is the median block's per product, net of a 1 × 1 product's
    (the dispatch, which the model's ops term prices), never below 0. A shape (and the
    1 × 1 floor) is timed once per process (:func:`_replayed`); a later step with the
    same shape is priced at that timing.

    Products that ran inside a TensorFlow graph are not replayed (not in
    ``products_flops``: the model prices them at the FLOP-rate curve). Replayed alone
    in a ``tf.function``'s while loop they took 2 to 6 times the whole measured step
    (s000-hjb at batch 1000, width 128: 84 ms of products against a 16.8 ms step;
    default study, 2026-12-02), so a product alone in a loop is not how the graph runs
    it; priced at the curve, 64 of 103 synced CPU points of that run were within 30 %,
    replayed that way 59.

    Why a replay and not the FLOP-rate curve: a product's speed depends on its shape,
    not only its FLOPs (a thin product moves more bytes per FLOP, a transposed operand
    takes another kernel), and the step's products are timed on the machine as it is
    just after the step was (a shared VM's speed drifts within a job). Operation-level
    timing is how Habitat predicts a step (G. X. Yu et al., "Habitat: A Runtime-Based
    Computational Performance Predictor for Deep Neural Network Training", USENIX ATC
    2021).

    Returns ``{"products_s": seconds per step (the per-step counts times each shape's
    net seconds), "products_flops": the FLOPs per step they cover, "products_faults":
    the page faults per step their calls took in the replay (:func:`_faults_per_call`),
    "seconds": how long the replay took}``. Exceptions from the framework propagate. Hand-rolled: a timeit
    per shape is all it is.
    """
    started = time.perf_counter()
    maker = _torch_product_maker if framework == "torch" else _tf_product_maker
    make, sync = maker(device)
    floor = None
    seconds = flops = faults = 0.0
    for *shape, per_step in products:
        batch, m, k, n, trans_a, trans_b, *graph = shape
        if graph and graph[0]:  # ran inside a graph: left to the FLOP-rate curve
            continue
        if floor is None:
            floor = _replayed(
                ("product floor", framework, device),
                lambda: _blocks(make(1, 1, 1, 1, False, False), sync, 1.0, 50)["median"],
            )
        work = 2.0 * batch * m * k * n
        reps = max(1, min(REPLAY_REPS, int(REPLAY_FLOPS / max(work, 1.0))))

        def replay(shape=(batch, m, k, n, trans_a, trans_b), reps=reps) -> tuple[float, float]:
            run = make(*shape)
            return _blocks(run, sync, 1.0, reps)["median"], _faults_per_call(run, sync)

        key = ("product", framework, device, batch, m, k, n, bool(trans_a), bool(trans_b))
        median, faulted = _replayed(key, replay)
        seconds += per_step * max(median - floor, 0.0)
        flops += per_step * work
        faults += per_step * faulted
    return {
        "products_s": seconds,
        "products_flops": flops,
        "products_faults": faults,
        "seconds": time.perf_counter() - started,
    }


#: Bytes moved per timed block of :func:`replay_elementwise` (a call's repetitions
#: per block: this over its bytes, 1 to :data:`REPLAY_REPS`): about a millisecond at
#: the 2-core VM's DRAM bandwidth.
REPLAY_BYTES = 4e7


def _torch_op(name: str):
    """The ATen overload ``name`` (``str`` of an ``OpOverload``, e.g.
    ``aten._softmax.default``) from ``torch.ops``."""
    import torch

    namespace, packet, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), packet), overload)


def _torch_args(encoded: str, target: str, floor: bool):
    """``(args, kwargs)`` of a call rebuilt from :func:`crossover_study.step_counts.
    encode_args`' JSON on device ``target``: each tensor new, random normal (floating
    point), zeros (integers: valid indices) or ones (booleans), of its shape, or with
    every dimension 1 (``floor``: the call's dispatch, which the ops term prices)."""
    import torch

    def decode(x):
        if isinstance(x, list):
            return [decode(v) for v in x]
        if not isinstance(x, dict):
            return x
        if "t" in x:
            dtype = getattr(torch, x["dtype"])
            shape = [1] * len(x["t"]) if floor else x["t"]
            if dtype.is_floating_point:
                return torch.randn(shape, dtype=dtype, device=target)
            if dtype == torch.bool:
                return torch.ones(shape, dtype=dtype, device=target)
            return torch.zeros(shape, dtype=dtype, device=target)
        if "dtype_arg" in x:
            return getattr(torch, x["dtype_arg"])
        if "device_arg" in x:
            return torch.device(x["device_arg"])
        return getattr(torch, x["torch_attr"])

    args, kwargs = json.loads(encoded)
    return decode(args), {k: decode(v) for k, v in kwargs.items()}


def replay_elementwise(device: str, calls) -> dict:
    """PyTorch's operations behind a step's ``mem_bytes`` (element-wise ops,
    reductions, copies, indexing) timed alone, one distinct call at a time, on
    ``device`` with the job's threads: ``calls`` is :attr:`crossover_study.step_counts.
    StepCounts.elementwise` (rows ``(op, args, bytes, per_step)``). Each call is rebuilt
    on new random tensors of its shapes (:func:`_torch_args`) and timed in
    :data:`BLOCKS` blocks of about :data:`REPLAY_BYTES` moved; its time is the median
    block's per call net of the same call with every dimension 1 (its dispatch, which
    the ops term prices), never below 0. A call that fails to rebuild or run is left
    out (its bytes stay priced at the bandwidth). A distinct call is timed once per
    process (:func:`_replayed`: a failed one is not tried again).

    Why: a step's element-wise work is not all bandwidth. On the 2-core VM (2026-12-04)
    ``softmax`` over the 3 classes of 2 000 rows took 82 µs where the same 6 000 floats
    as 3 rows of 2 000 took 8 µs, and ``exp`` of 131 072 floats 94 µs where their bytes
    at DRAM speed take 24 µs; s000-hjb's ``tanh`` at batch 10 000, width 32 took 3.4 ms
    of a 13.7 ms step. This is the products' replay (:func:`replay_products`) carried
    over to every operation, as Habitat times a step operation by operation.

    Returns ``{"elementwise_s": seconds per step, "elementwise_bytes": the bytes per
    step of the calls timed, "elementwise_faults": the page faults per step their
    full-shape calls took in the replay (:func:`_faults_per_call`)}``. Hand-rolled: a
    timeit per call is all it is."""
    target, sync = _torch_sync(device)

    def call_s(op, encoded: str, floor: bool, reps: int) -> tuple[float, float]:
        args, kwargs = _torch_args(encoded, target, floor)
        run = _repeat(lambda: op(*args, **kwargs))
        seconds = _blocks(run, sync, 1.0, reps)["median"]
        return seconds, 0.0 if floor else _faults_per_call(run, sync)

    def replay(name: str, encoded: str, reps: int) -> tuple[float, float, float] | None:
        try:
            op = _torch_op(name)
            full, faulted = call_s(op, encoded, False, reps)
            floor, _ = call_s(op, encoded, True, 50)
        except Exception:  # noqa: BLE001 - a call that cannot be rebuilt stays with the bytes
            return None
        return full, faulted, floor

    seconds = moved = faults = 0.0
    for name, encoded, nbytes, per_step in calls:
        reps = max(1, min(REPLAY_REPS, int(REPLAY_BYTES / max(nbytes, 1.0))))
        key = ("elementwise", "torch", device, name, encoded)
        timed = _replayed(key, lambda n=name, e=encoded, r=reps: replay(n, e, r))
        if timed is None:
            continue
        full, faulted, floor = timed
        seconds += per_step * max(full - floor, 0.0)
        moved += per_step * nbytes
        faults += per_step * faulted
    return {"elementwise_s": seconds, "elementwise_bytes": moved, "elementwise_faults": faults}


def replay_columns(columns: dict, framework: str, device: str) -> dict:
    """``step_products_s`` and ``step_products_flops`` of a counted point (``columns``:
    its ``step_*`` columns from :func:`crossover_study.step_counts.count_point`): its
    ``step_products`` timed by :func:`replay_products` plus its ``step_rnn_layers``
    (PyTorch) by :func:`replay_rnn_layers`; both None without either, or with a line
    on stderr (the job log) when the replay fails. And ``step_elementwise_s`` and
    ``step_elementwise_bytes``: its ``step_elementwise`` (PyTorch) timed by
    :func:`replay_elementwise`, None without them or when that fails. Each replay's
    page faults per step beside it (``step_products_faults``,
    ``step_elementwise_faults``). Never raises."""
    return {
        **_replay_products_columns(columns, framework, device),
        **_replay_elementwise_columns(columns, framework, device),
    }


def _replay_products_columns(columns: dict, framework: str, device: str) -> dict:
    """:func:`replay_columns`' products."""
    empty = {"step_products_s": None, "step_products_flops": None, "step_products_faults": None}
    products, layers = columns.get("step_products"), columns.get("step_rnn_layers")
    if not products and not layers:
        return empty
    seconds = flops = faults = 0.0
    try:
        if products:
            replay = replay_products(framework, device, json.loads(products))
            seconds, flops = replay["products_s"], replay["products_flops"]
            faults = replay["products_faults"]
        if layers and framework == "torch":
            replay = replay_rnn_layers(device, json.loads(layers))
            seconds, flops = seconds + replay["products_s"], flops + replay["products_flops"]
    except Exception as exc:  # noqa: BLE001 - the replay must never lose the counts
        print(f"step products: not replayed ({type(exc).__name__}: {exc})", file=sys.stderr)
        return empty
    return {
        "step_products_s": seconds,
        "step_products_flops": flops,
        "step_products_faults": faults,
    }


def _replay_elementwise_columns(columns: dict, framework: str, device: str) -> dict:
    """:func:`replay_columns`' element-wise calls."""
    calls = columns.get("step_elementwise")
    empty = {
        "step_elementwise_s": None,
        "step_elementwise_bytes": None,
        "step_elementwise_faults": None,
    }
    if not calls or framework != "torch":
        return empty
    try:
        replay = replay_elementwise(device, json.loads(calls))
    except Exception as exc:  # noqa: BLE001 - the replay must never lose the counts
        print(f"step element-wise ops: not replayed ({type(exc).__name__}: {exc})", file=sys.stderr)
        return empty
    return {
        "step_elementwise_s": replay["elementwise_s"],
        "step_elementwise_bytes": replay["elementwise_bytes"],
        "step_elementwise_faults": replay["elementwise_faults"],
    }


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
