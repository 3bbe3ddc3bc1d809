"""What one training step does, counted rather than timed: operations dispatched,
floating-point operations (FLOPs), bytes its element-wise operations touch and bytes
copied between host and device.

The answers say *when* the accelerator overtakes the CPU; these counts say *why*: a step
of a few hundred small operations costs a few hundred kernel launches on a GPU whatever
its FLOPs, so it stays launch-bound until its FLOPs outweigh the launches
(:mod:`crossover_study.stepmodel.model`). Counting runs one call of the training program
after the timed blocks (the counters slow the step they watch) and changes nothing the
harness timed (:func:`count_point`).

What is counted, and how:

- **ops**: PyTorch on the CPU: the ATen operators the step dispatches, counted by a
  ``TorchDispatchMode`` (every call that reaches the dispatcher below autograd, the
  backward's included; the profiler's ``record_function`` markers left out). PyTorch
  on CUDA: the device activities (kernels, memory copies and sets) the profiler
  records (``torch.profiler``, ``ProfilerActivity.CUDA``). TensorFlow: the operations
  executed, counted by an op callback (``tensorflow.python.framework.op_callbacks``,
  the hook ``tf.debugging.enable_check_numerics`` uses) while ``tf.function`` bodies run
  eagerly (``tf.config.run_functions_eagerly``), so that the ops inside a traced
  function, a while loop's iterations included, are seen with their shapes; a second
  call with functions left as they are tells how many of them run inside a compiled
  graph (``graph_ops``) rather than one by one from Python.
- **flops**: PyTorch: the shape formulas of ``torch.utils.flop_counter`` (matrix
  products, convolutions, attention; forward and backward; 2 FLOPs per multiply-add),
  plus the LSTM layers the counter does not reach (oneDNN's ``mkldnn_rnn_layer`` on the
  CPU, cuDNN's ``_cudnn_rnn``): 2 FLOPs per multiply-add of their gate matrices,
  2·T·B·(4H·(I + H)) forward per layer, twice that backward. TensorFlow: ``MatMul`` and
  ``BatchMatMul`` ops, 2·m·k·n each from their shapes (Keras's LSTM runs its gates as
  MatMuls, so they are included). Element-wise work is not FLOPs here: it is counted
  as bytes.
- **products**: the matrix products behind ``flops``, by shape and layout
  (:attr:`StepCounts.products`), which the measuring job then times one shape at a
  time (:func:`crossover_study.stepmodel.replay.replay_products`): a product's speed depends
  on its shape, not only its size (on the 2-core VM a 32 × 180 · 180 × 720 gate product
  ran at 58 GFLOP/s, a square product of the same FLOPs at 108, a 2000 × 4 · 4 × 2048
  one at 6; 2026-12-02).
- **rnn_layers**: PyTorch's LSTM layer ops by shape (:attr:`StepCounts.rnn_layers`),
  which the job times whole, a one-layer ``torch.nn.LSTM`` of the same shape, rather
  than as the gate products :func:`lstm_products` decomposes them into: a oneDNN layer
  is more than its products (the gates' element-wise arithmetic, the per-time-step
  loop); s004-lstm's three layers at 45 units took 17 ms forward and backward where
  their gate products replayed alone took 11.7 ms (2-core VM, 2026-12-02).
- **rnn_modules** (PyTorch on the CPU): each ``torch.nn.RNN``/``GRU``/``LSTM`` call
  the step makes, noted by a global module forward hook and counted again alone, a
  module of the same configuration on input of the same shape, forward and backward,
  under the same operator counter (:attr:`StepCounts.rnn_modules`): the ops, kernels,
  products and element-wise calls it accounts for. On the CPU a GRU or RNN layer runs
  as ATen ops per time step (a 2-layer GRU of 50 steps: 4 635 of its step's 4 776 ops),
  which a GPU runs as a few cuDNN kernels per step from one host op; the device cards
  replace them (:func:`crossover_study.stepmodel.card_rnn.cudnn_rnn_work`). TensorFlow:
  each Keras ``LSTM`` or ``GRU`` call that Keras would run on cuDNN on a GPU
  (:func:`crossover_study.stepmodel.counts_tf.count_keras_rnn_call`), likewise.
- **mem_bytes**: bytes read and written by the operations that are not FLOP-counted
  (element-wise, reductions, copies; views and scalar reads left out), the sizes of
  their tensor inputs and outputs: the memory traffic of the roofline's memory roof.
- **elementwise** (PyTorch): the calls behind ``mem_bytes`` by ATen overload and
  arguments, tensors by shape and dtype (:func:`encode_args`), which the measuring job
  then times one call at a time (:func:`crossover_study.stepmodel.replay.replay_elementwise`):
  an element-wise op's speed is not only its bytes (``softmax`` over 3 classes of 2 000
  rows took ten times as long as over 3 rows of 2 000 on the 2-core VM, 2026-12-04).
- **copy_bytes**: bytes copied between host memory and a device (PyTorch: ``_to_copy``
  and ``copy_`` across devices, ``item()`` of a device tensor; TensorFlow: inputs an op
  got from another device type than its output's). 0 on the CPU.

For s001-mlp the closed form :func:`~crossover_study.stepmodel.record.mlp_matmul_flops` gives
the same FLOPs, which the tests check. The record of a counted step and the closed forms
are :mod:`crossover_study.stepmodel.record`'s; the counters are
:mod:`crossover_study.stepmodel.counts_torch`'s and :mod:`crossover_study.stepmodel.counts_tf`'s.
"""

from __future__ import annotations

import sys

from crossover_study.core import cpu_flags
from crossover_study.stepmodel import host_calls
from crossover_study.stepmodel.counts_tf import ONE_DEVICE_FETCHES, count_tf_step
from crossover_study.stepmodel.counts_torch import count_torch_step


def count_point(workload, framework: str, device: str, steps_per_block: int | None = None) -> dict:
    """The ``step_*`` columns of a measured point: one call of its training program
    (``workload.steps_per_call`` steps) counted by :func:`count_torch_step` or
    :func:`count_tf_step`, after the timed blocks and the loss read back (the counted
    steps are applied to the model but are never timed); the measuring job then replays
    its products (:func:`crossover_study.stepmodel.replay.replay_columns`). Never raises: a
    program the counters cannot follow gives empty columns and a line on stderr (the
    job log) saying why.

    A workload whose ``run(n)`` makes one traced-function call for all n steps
    (``one_call_per_block``: TensorFlow's loop variant, a ``tf.while_loop`` of n steps)
    is counted with one step in that call, but its timed blocks ran ``steps_per_block``
    (the measurement's k) steps per call: ``step_function_calls`` is then the counted
    calls over k, the call's cost spread over the block as the timing spread it (one
    call per step overpriced s000-hjb's loop at twice its measured step).

    The same call is watched for what the user's code does on the host
    (:mod:`crossover_study.stepmodel.host_calls`): its reads back from the device and its
    host-side data, ``step_host_reads``, ``step_host_reads_where`` and
    ``step_host_data_where``; and on the CPU whether it emulates the precision the
    products ran in (``step_flops_emulated``, :mod:`crossover_study.core.cpu_flags`).
    """
    steps = int(workload.steps_per_call)

    def step() -> None:
        workload.run(steps)
        workload.sync()

    watch = host_calls.HostCalls()
    try:
        if framework == "torch":
            with watch:
                counts = count_torch_step(step, steps, device, watch)
        else:
            import tensorflow as tf

            functions = [
                v
                for v in vars(workload).values()
                if isinstance(v, tf.types.experimental.GenericFunction)
            ]
            fetches = getattr(workload, "batch_fetches", ONE_DEVICE_FETCHES)
            counts = count_tf_step(step, steps, functions, fetches, watch)
    except Exception as exc:  # noqa: BLE001 - counting must never lose a measured row
        print(f"step counts: not counted ({type(exc).__name__}: {exc})", file=sys.stderr)
        return {}
    columns = counts.columns()
    columns.update(host_calls.columns(watch, steps))
    if device == "cpu":
        columns["step_flops_emulated"] = cpu_flags.emulated(columns.get("step_flops_precision"))
    calls = columns.get("step_function_calls")
    if getattr(workload, "one_call_per_block", False) and steps_per_block and calls:
        columns["step_function_calls"] = calls * steps / steps_per_block
    return columns
