"""The study's tables and their columns, named once.

A study's results (``results/<study>/``, format 3) hold one table per concern, each a
CSV file keyed by the point (:data:`POINT_KEY` and the size columns): ``timings.csv``
holds the columns a person reads (:data:`TIMINGS`), the others hold what a point
measured besides, in wide form where a point has one value per column
(:data:`WIDE_TABLES`) and in long form, one row per value, where a point has many
(:data:`LONG_TABLES`). Rates stay in ``rates/<framework>/<device>.json``; ``rates.csv``
holds only the rates of a row priced at other rates than that file's
(:data:`RATES`). Every column is described once, in
``workflow/schemas/timings.schema.yaml`` (the whole row of a point, as a measuring job
writes it and :func:`crossover_study.analysis.tables.read_timings` returns it); each
table's own schema is ``workflow/schemas/<table>.schema.yaml``. The split and the join:
:mod:`crossover_study.analysis.table_split`.

Names only: this module imports nothing, so that every floor may use it.
"""

from __future__ import annotations

# The most-used column names.
CASE = "case"
FRAMEWORK = "framework"
DEVICE = "device"
VARIANT = "variant"
TIMING = "timing"
REPLICAS = "replicas"
SCALING = "scaling"
AXES = "axes"
FORMAT_VERSION = "format_version"
STATUS = "status"
MESSAGE = "message"
STEP_TIME_S = "step_time_s"
STEP_TIME_IQR_S = "step_time_iqr_s"
NOISY = "noisy"
BLOCK_STEP_TIMES_S = "block_step_times_s"
BLOCKS_PER_RUN = "blocks_per_run"
REPEAT = "repeat"
PROGRAM = "program"

#: The columns that, with the size columns, name a point: what two tables or two runs are
#: matched on, and the key of every table beside ``timings.csv``.
POINT_KEY: tuple[str, ...] = (CASE, FRAMEWORK, DEVICE, VARIANT, TIMING, REPLICAS, SCALING)

#: The seed cases' size columns (a case of the user's own brings columns named after its
#: own axes, after these).
SEED_SIZES: tuple[str, ...] = ("batch", "width", "d_in", "hidden", "units", "seq_len")

#: ``timings.csv``: one row per point, the columns a person reads (the size columns of a
#: plug-in case follow them).
TIMINGS: tuple[str, ...] = (
    *POINT_KEY,
    *SEED_SIZES,
    AXES,
    FORMAT_VERSION,
    "global_batch",
    STATUS,
    MESSAGE,
    STEP_TIME_S,
    STEP_TIME_IQR_S,
    NOISY,
    # a variant's speed-up over eager, paired (its blocks interleaved with eager's)
    "speedup",
    "speedup_low",
    "speedup_high",
    "steps_per_block",
    "n_blocks",
    "step_time_pi_low_s",
    "step_time_pi_high_s",
    "first_step_s",
    "cold_start_s",
    "samples_per_s",
    "retraced",
    "nonfinite_loss",
    "contended",
    "same_program",
    "precision",
    PROGRAM,
    "device_name",
    "note",
)

#: ``attribution.csv``: the measured (profiler) and device attribution of a point's step.
ATTRIBUTION: tuple[str, ...] = (
    "attr_ops_s",
    "attr_python_s",
    "attr_data_s",
    "attr_trace_s",
    "attr_fit_s",
    "attr_wait_s",
    "attr_unattributed_s",
    "attr_block_s",
    "attr_steps",
    "attr_events",
    "attr_dominant",
    "attr_fit_entry",
    "attr_first_settled",
    "attr_first_lead",
    "attr_coverage",
    "attr_accounted",
    "attr_overhead",
    "attr_cost_s",
    "attr_setup_s",
    "attr_device_busy_s",
    "attr_device_idle_s",
    "attr_device_largest_gap_s",
    "attr_device_kernel_s",
    "attr_kernels",
    "attr_kernel_median_s",
    "attr_short_kernel_share",
    "attr_launch_s",
    "attr_h2d_copies",
    "attr_d2h_copies",
    "attr_h2d_bytes",
    "attr_d2h_bytes",
    "attr_copy_s",
    "attr_syncs",
    "attr_sync_wait_s",
    "attr_device_regime",
    "attr_device_source",
    "input_batch_s",
    "input_pipeline",
    "fp32_step_s",
    "fp32_speedup",
    "fp32_speedup_low",
    "fp32_speedup_high",
)

#: ``counts.csv``: what one step does (operations, FLOPs, bytes, page faults), the
#: replays' times and the step-time model's prediction from them.
COUNTS: tuple[str, ...] = (
    "step_ops",
    "step_ops_kind",
    "step_graph_ops",
    "step_function_calls",
    "step_flops",
    "step_flop_ops",
    "step_products_s",
    "step_products_flops",
    "step_elementwise_s",
    "step_elementwise_bytes",
    "step_products_faults",
    "step_elementwise_faults",
    "count_s",
    "replay_s",
    "step_page_faults",
    "step_flops_source",
    "step_mem_bytes",
    "step_mem_ops",
    "step_copy_bytes",
    "step_host_reads",
    "step_host_reads_where",
    "step_host_data_where",
    "step_flops_precision",
    "step_flops_emulated",
    "model_step_s",
    "model_ops_s",
    "model_compute_s",
    "model_memory_s",
    "model_copy_s",
    "model_regime",
    "model_share",
)

#: ``measurement.csv``: how the point was measured: the program's loop, the harness's
#: checks, the costs of measuring, the pairing with eager and the process it was timed in.
MEASUREMENT: tuple[str, ...] = (
    REPEAT,
    "repeats",
    "warmup_steps",
    "steps_per_call",
    "loss_read_every",
    "validates_each_epoch",
    "fit_epochs_per_iterator",
    "kernel",
    "timer_overhead_s",
    "sync_check",
    "sync_check_long_s",
    "sync_check_steps",
    "traces_first_step",
    "traces_warmup",
    "traces_timed",
    "device_init_s",
    "import_s",
    "measured_s",
    "point_wall_s",
    "final_loss",
    "interleaved",
    "interleaved_reason",
    "paired_rounds",
    "paired_eager_step_s",
    "same_program_message",
    "same_program_s",
    "allreduce_s",
    "allreduce_share",
    "grad_bytes",
    "step_state",
    "job_measured_s",
    "job_step_time_s",
    "job_page_faults",
    "trimmed_page_faults",
    "fresh_process_s",
    "malloc_env",
    "attempts",
)

#: ``environment.csv``: where and with what the point ran: threads, the host's load,
#: host, devices, versions, Slurm placement, the workload file, the code and the run.
ENVIRONMENT: tuple[str, ...] = (
    "threads",
    "interop_threads",
    "threads_timed",
    "threads_changed",
    "threads_per_replica",
    "host_load_1m",
    "host_load_start",
    "host_load_end",
    "host_cpus_others",
    "contention_wait_s",
    "remeasured",
    "host",
    "cpu_model",
    "replica_devices",
    "framework_version",
    "cuda_version",
    "gpu_driver_version",
    "gpu_sm_clock_mhz",
    "gpu_throttle_reasons",
    "python_version",
    "partition",
    "node",
    "workload_file",
    "workload_sha256",
    "git_commit",
    "git_dirty",
    "config_hash",
    "run_id",
    "utc_time",
    "precision_settings",
)

#: Tables beside ``timings.csv`` with one row per point (the point key, then these).
WIDE_TABLES: dict[str, tuple[str, ...]] = {
    "attribution": ATTRIBUTION,
    "counts": COUNTS,
    "measurement": MEASUREMENT,
    "environment": ENVIRONMENT,
}

#: The row's rates, read from ``rates/<framework>/<device>.json``
#: (:func:`crossover_study.stepmodel.rates.row_columns`); curves are JSON lists there.
RATE_COLUMNS: tuple[str, ...] = (
    "rate_eager_op_s",
    "rate_graph_op_s",
    "rate_function_call_s",
    "rate_fit_call_s",
    "rate_fit_epoch_s",
    "rate_fit_validation_s",
    "rate_fit_step_s",
    "rate_fit_iterator_s",
    "rate_flop_per_s",
    "rate_flop_curve",
    "rate_mem_bytes_per_s",
    "rate_mem_curve",
    "rate_mem_dram_bytes_per_s",
    "rate_copy_bytes_per_s",
    "rate_page_fault_s",
)

#: Long tables: table -> (the row's column it holds, the index column or None for a
#: mapping kept in order, the fields of each value). A row's JSON list (of numbers, or of
#: lists: one field each) or JSON object (name -> value) becomes one row per element; an
#: empty one, one row whose index and fields are empty; a mapping's cell that is not a
#: JSON object (the reason a row was not profiled), one row whose name is empty.
#: Field names never repeat a key column's (a product's batch is ``product_batch``).
LONG_TABLES: dict[str, tuple[str, str | None, tuple[str, ...]]] = {
    "blocks": (BLOCK_STEP_TIMES_S, "block", ("seconds_per_step",)),
    "compile_cache": ("compile_cache", None, ("counter", "count")),
    "top_ops": ("attr_top_ops", None, ("op", "seconds_per_step")),
    "tracer_bias": ("attr_bias_s", None, ("event", "seconds")),
    "attribution_sources": ("attr_source", None, ("category", "source")),
    "products": (
        "step_products",
        "product",
        ("product_batch", "m", "k", "n", "trans_a", "trans_b", "in_graph", "per_step"),
    ),
    "rnn_layers": (
        "step_rnn_layers",
        "layer",
        ("steps", "layer_batch", "inputs", "layer_hidden", "backward", "per_step"),
    ),
    "elementwise": ("step_elementwise", "call", ("op", "args", "bytes", "per_step")),
    "rnn_modules": (
        "step_rnn_modules",
        "module",
        (
            "rnn_kind",
            "steps",
            "module_batch",
            "inputs",
            "module_hidden",
            "layers",
            "directions",
            "backward",
            "elem_bytes",
            "module_ops",
            "module_kernels",
            "module_flops",
            "module_mem_bytes",
            "module_products",
            "module_elementwise",
            "per_step",
        ),
    ),
}

#: Fields of the long tables that hold text (the others hold JSON numbers and booleans,
#: written as JSON writes them).
LONG_TEXT_FIELDS: frozenset[str] = frozenset(
    {
        "counter",
        "op",
        "event",
        "category",
        "source",
        "args",
        "rnn_kind",
        "module_products",
        "module_elementwise",
    }
)

#: ``blocks.csv``'s column for the run of a point measured in several runs
#: (``blocks_per_run``): the run each block came from, 0-based.
RUN = "run"

#: ``rates.csv``: the rates of the rows priced at other rates than their
#: ``rates/<framework>/<device>.json`` (or without such a file): the point key, then these.
RATES: tuple[str, ...] = ("rate", "point", "size", "value")

#: Every table of a study, ``timings`` first, in the order they are written.
STUDY_TABLES: tuple[str, ...] = ("timings", *WIDE_TABLES, *LONG_TABLES, "rates")
