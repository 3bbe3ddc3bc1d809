"""The remedy sentence: the fastest variant against the naive program, measured."""

import pandas as pd

from crossover_study.answers import remedy_sentence


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
            _row("tensorflow", "custom_step", 0.8e-3),
            _row("tensorflow", "train_on_batch", 1.7e-3),
            _row("tensorflow", "eager", 1e-6, timing="unsynced"),  # never a remedy
            _row("torch", "eager", 0.6e-3),
            _row("torch", "copy_data_each_step", 0.7e-3),
            _row("torch", "compile", 0.57e-3),  # 5% faster: within noise, not a remedy
        ]
    )
    text = remedy_sentence(df, "s002-iris")
    assert (
        "tensorflow custom_step takes 800 µs per step, 25\u00d7 faster than eager (20 ms)" in text
    )
    assert "no torch variant beats eager (600 µs) by more than 10%" in text


def test_no_variants_measured():
    df = pd.DataFrame([_row("torch", "eager", 1e-3)])
    assert remedy_sentence(df, "s002-iris") == (
        "No variant other than eager was measured at the seed's size."
    )
