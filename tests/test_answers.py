"""The remedy sentence: the fastest variant against the naive program, measured."""

import pandas as pd
from conftest import s001_rows

from crossover_study.answers.remedies import remedy_sentence


def _row(framework, variant, t, device="cpu", timing="synced"):
    return {
        "case": "s002-iris",
        "framework": framework,
        "device": device,
        "variant": variant,
        "timing": timing,
        "batch": 20,
        "hidden": 32,
        "status": "ok",
        "step_time_s": t,
    }


def test_best_remedy_is_named_with_its_measured_speedup():
    df = pd.DataFrame(
        [
            _row("tensorflow", "eager", 20e-3),
            _paired("tensorflow", "custom_step", 0.8e-3, 25.0, 24.0, 26.0),
            _paired("tensorflow", "train_on_batch", 1.7e-3, 11.8, 11.0, 12.5),
            _row("tensorflow", "eager", 1e-6, timing="unsynced"),  # never a remedy
            _row("torch", "eager", 0.6e-3),
            _row("torch", "copy_data_each_step", 0.7e-3),
            _row("torch", "compile", 0.57e-3),  # 5% faster: within noise, not a remedy
        ]
    )
    text = remedy_sentence(df, "s002-iris")
    assert (
        "tensorflow custom_step takes 800 µs per step, 25.00\u00d7 faster than eager (20 ms; "
        "95 % CI 24.00–26.00)" in text
    )
    assert "no torch variant beats eager (600 µs) by more than 10%" in text
    # Measured apart, with no paired interval (issue 62): never offered, said so.
    apart = remedy_sentence(df.drop(columns=["interleaved", "speedup"]), "s002-iris")
    assert "no tensorflow variant beats eager (20 ms) by more than 10%" in apart
    assert (
        "custom_step 25\u00d7 faster, but measured apart from eager, with no paired interval, "
        "so not offered" in apart
    )


def _paired(framework, variant, t, speedup, low, high):
    return {
        **_row(framework, variant, t),
        "interleaved": True,
        "speedup": speedup,
        "speedup_low": low,
        "speedup_high": high,
    }


def test_a_remedy_whose_interval_reaches_below_the_margin_is_never_offered():
    """Measured apart, compile's medians say 1.5x (the machine's speed moved between the
    two points); interleaved with eager its paired speed-up is 1.02x (0.95-1.12): not a
    remedy, and the sentence says it is no different within noise."""
    from crossover_study.answers.remedies import remedy_table
    from crossover_study.answers.summary import _best_cpu_remedy

    df = pd.DataFrame(
        [
            _row("torch", "eager", 30e-3),
            _paired("torch", "compile", 20e-3, 1.02, 0.95, 1.12),
            _paired("torch", "read_loss_every_1000", 29e-3, 1.04, 1.02, 1.09),
        ]
    )
    table = remedy_table(df)
    assert not table["offered"].any()
    text = remedy_sentence(df, "s002-iris")
    assert "no torch variant beats eager (30 ms) by more than 10%" in text
    assert (
        "read_loss_every_1000 1.04\u00d7 faster, but its 95 % CI 1.02–1.09 reaches below 1.1"
        in text
    )
    assert "takes" not in text
    assert _best_cpu_remedy(df) == "CPU: none beats eager by 10%"


def test_a_remedy_is_offered_with_its_paired_interval():
    from crossover_study.answers.summary import _best_cpu_remedy

    df = pd.DataFrame(
        [
            _row("torch", "eager", 30e-3),
            _paired("torch", "compile", 20e-3, 1.45, 1.38, 1.52),
            _paired("torch", "read_loss_every_1000", 29e-3, 0.99, 0.95, 1.03),
        ]
    )
    text = remedy_sentence(df, "s002-iris")
    assert (
        "torch compile takes 20 ms per step, 1.45\u00d7 faster than eager (30 ms; 95 % CI "
        "1.38–1.52)" in text
    )
    assert _best_cpu_remedy(df) == "CPU: compile 1.4\u00d7 (1.38–1.52)"


def test_no_variants_measured():
    df = pd.DataFrame([_row("torch", "eager", 1e-3)])
    assert remedy_sentence(df, "s002-iris") == (
        "No variant other than eager was measured at the seed's size."
    )


def test_remedy_shift_sentence_sets_the_remedy_beside_eager():
    import json

    from crossover_study.analysis.crossover import crossover_table
    from crossover_study.analysis.shifts import remedy_shift
    from crossover_study.answers.remedies import remedy_shift_sentence

    rows = []
    for device, variant, times in (
        ("cpu", "eager", [1e-5 * h for h in (32, 128, 512, 2048)]),
        ("cuda", "eager", [2.56e-3] * 4),
        ("cuda", "cuda_graph", [6.4e-4] * 4),
    ):
        for h, t in zip((32, 128, 512, 2048), times, strict=True):
            rows.append(
                {
                    "case": "s001-mlp",
                    "framework": "torch",
                    "device": device,
                    "variant": variant,
                    "batch": 64,
                    "d_in": 1024,
                    "hidden": h,
                    "status": "ok",
                    "step_time_s": t,
                    "block_step_times_s": json.dumps([t, t, t]),
                    "cold_start_s": 0.1 if device == "cpu" else 1.0,
                    "first_step_s": 0.01,
                }
            )
    shift = remedy_shift(crossover_table(pd.DataFrame(rows), n_boot=50))
    text = remedy_shift_sentence(shift, "s001-mlp")
    # At H = 128: CPU eager 1.28 ms vs GPU graph 0.64 ms -> 2x faster; N* = (1.01 - 0.11)
    # / (1.28e-3 - 0.64e-3) = 1407 steps; eager's GPU is slower: never.
    assert "torch cuda_graph on CUDA is 2.0\u00d7 faster than the CPU's eager" in text
    assert "overtakes it at hidden ≈ 64 (eager: at hidden ≈ 256; 4.0\u00d7 smaller)" in text
    assert "time-to-train wins after 1,407 steps (eager: never)" in text
    empty = remedy_shift_sentence(shift, "s000-hjb")
    assert empty.startswith("No remedy (a variant other than eager) has ok accelerator rows")


def test_an_anti_pattern_is_never_the_best_remedy():
    df = pd.DataFrame(
        [
            _row("torch", "eager", 420e-6),
            _row("torch", "copy_data_each_step", 368e-6),  # noise on a CPU: not a fix
            _row("torch", "read_loss_every_step", 300e-6),
            _row("torch", "compile", 400e-6),
        ]
    )
    text = remedy_sentence(df, "s002-iris")
    assert "no torch variant beats eager (420 µs) by more than 10%" in text
    assert "copy_data_each_step" not in text and "read_loss_every_step" not in text


def test_the_tpus_program_measured_to_price_a_tpu_is_never_a_remedy():
    """strategy_step is measured on the CPU so that a TPU card prices the program a TPU
    runs (no fit, no validation): never ranked beside eager's remedies."""
    from crossover_study.answers.remedies import remedy_table

    df = pd.DataFrame(
        [
            _row("tensorflow", "eager", 23e-3),
            _row("tensorflow", "strategy_step", 0.9e-3),
            _row("tensorflow", "custom_step", 1.0e-3),
        ]
    )
    table = remedy_table(df)
    assert list(table.index) == ["custom_step"]
    assert "strategy_step" not in remedy_sentence(df, "s002-iris")


def test_each_framework_s_reason_for_a_missing_device_is_given():
    from crossover_study.answers.sentences import answer_sentence

    rows = [_row("torch", "eager", 5e-4), _row("tensorflow", "eager", 2e-2)]
    for framework, why in (
        ("torch", "torch has no TPU backend here"),
        ("tensorflow", "no TPU usable by TensorFlow: TPUs not found"),
    ):
        rows.append(
            {
                **_row(framework, "eager", None, device="tpu"),
                "status": "unavailable",
                "message": why,
            }
        )
    text = answer_sentence(pd.DataFrame(rows), None, "s002-iris")
    assert (
        "no TPU device was visible on this machine (torch: torch has no TPU backend here; "
        "tensorflow: no TPU usable by TensorFlow: TPUs not found)"
    ) in text


def test_a_flagged_headline_number_says_so():
    from crossover_study.answers.sentences import answer_sentence

    rows = [
        {**_row("torch", "eager", 4.5e-4), "sync_check": "failed", "noisy": True},
        {**_row("tensorflow", "eager", 2e-2), "sync_check": "passed", "noisy": False},
    ]
    text = answer_sentence(pd.DataFrame(rows), None, "s002-iris")
    assert "450 µs per step with torch (flagged: block-length check failed, noisy)" in text
    assert "20 ms per step with tensorflow;" in text  # a clean row carries no flag


def _mlp_rows(device, times):
    return s001_rows(device, (32, 128, 512, 2048), times)


def test_noise_is_answered_as_indistinguishable_not_as_faster():
    from crossover_study.analysis.crossover import crossover_table
    from crossover_study.analysis.shifts import remedy_shift
    from crossover_study.answers.remedies import remedy_shift_sentence
    from crossover_study.answers.sentences import answer_sentence

    cpu = [1e-5 * h for h in (32, 128, 512, 2048)]
    # Medians 0.5% apart, blocks 1% apart: the same speed within noise at every size.
    acc = [t * f for t, f in zip(cpu, (0.995, 1.005, 0.995, 1.005), strict=True)]
    timings = pd.DataFrame(_mlp_rows("cpu", cpu) + _mlp_rows("cuda", acc))
    crossover = crossover_table(timings, n_boot=200)
    assert crossover.loc[crossover["axis"] == "hidden", "outcome"].item() == "indistinguishable"
    text = answer_sentence(timings, crossover, "s001-mlp")
    assert (
        "CUDA is indistinguishable from the CPU within noise at the seed's size "
        "(medians 1.0\u00d7 slower)"  # 0.5% slower at hidden = 128
    ) in text
    assert "it is indistinguishable from the CPU within noise at every size measured on hidden" in (
        text
    )
    assert "overtakes" not in text and "faster over the whole" not in text

    graph = pd.DataFrame([{**r, "variant": "cuda_graph"} for r in _mlp_rows("cuda", acc)])
    shift = remedy_shift(crossover_table(pd.concat([timings, graph]), n_boot=200))
    assert "overtakes it nowhere: indistinguishable within noise at every hidden measured" in (
        remedy_shift_sentence(shift, "s001-mlp")
    )


def test_faster_at_part_of_the_range_places_no_crossover():
    from crossover_study.analysis.crossover import crossover_table
    from crossover_study.answers.sentences import answer_sentence

    cpu = [1e-5 * h for h in (32, 128, 512, 2048)]
    # Tied at 32 and 128, 2x faster at 512 and 2048: never shown slower.
    acc = [t * f for t, f in zip(cpu, (1.0, 1.0, 0.5, 0.5), strict=True)]
    timings = pd.DataFrame(_mlp_rows("cpu", cpu) + _mlp_rows("cuda", acc))
    crossover = crossover_table(timings, n_boot=200)
    row = crossover[crossover["axis"] == "hidden"].iloc[0]
    assert row["outcome"] == "accelerator_faster_in_part"
    assert row["size_verdicts"] == "32:tied 128:tied 512:faster 2048:faster"
    text = answer_sentence(timings, crossover, "s001-mlp")
    assert "CUDA is indistinguishable from the CPU within noise at the seed's size" in text
    assert "(equal medians)" in text
    assert (
        "it is faster only at part of the measured range of hidden (hidden = 512, 2048), "
        "with no smaller size where it is slower, so no crossover is placed"
    ) in text


def test_a_variant_slower_than_eager_is_called_slower():
    df = pd.DataFrame(
        [_row("torch", "eager", 367e-6), _paired("torch", "compile", 570e-6, 0.71, 0.68, 0.71)]
    )
    text = remedy_sentence(df, "s002-iris")
    assert "the fastest, compile slower than eager (0.71\u00d7, 95 % CI 0.68–0.71)" in text
