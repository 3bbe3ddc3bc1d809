"""Float precision: fp32 pinned in every measuring job, the tf32 variant's context, the
precision columns read back from the frameworks, old tables without them."""

import pandas as pd
import pytest

from crossover_study.analysis.crossover import crossover_table
from crossover_study.analysis.tables import collect_timings
from crossover_study.core.origin import table_columns
from crossover_study.core.paths import REPO_ROOT
from crossover_study.measure import frameworks
from crossover_study.measure.runner import GroupSpec, run_group
from crossover_study.study.points import TimingPolicy
from crossover_study.study.spec import VARIANTS, PointSpec
from crossover_study.workloads import precision

SMALL = {"batch": 16, "d_in": 32, "hidden": 8}
POLICY = TimingPolicy(min_block_s=0.002, n_blocks=3, max_warmup_s=0.02, sync_check_s=0.02)
COMMITTED_CPU_RUN = REPO_ROOT / "results" / "reference" / "cpu-2core-2026-11-30"


def _group(framework, variants, device="cpu"):
    points = tuple(PointSpec("s001-mlp", framework, device, v, SMALL) for v in variants)
    return GroupSpec("s001-mlp", framework, device, points, 1, POLICY, "skip", "testhash")


def _tf32_flags(framework) -> dict[str, object]:
    """The TF32 switches, read from the framework itself (not through the module under
    test): torch's legacy booleans and, on torch >= 2.9, fp32_precision of cuBLAS
    matmuls and cuDNN convolutions and RNNs; TensorFlow's global switch."""
    if framework == "torch":
        import torch

        b = torch.backends
        flags = {"matmul": b.cuda.matmul.allow_tf32, "cudnn": b.cudnn.allow_tf32}
        if hasattr(b, "fp32_precision"):
            flags.update(
                matmul_fp32_precision=b.cuda.matmul.fp32_precision,
                conv_fp32_precision=b.cudnn.conv.fp32_precision,
                rnn_fp32_precision=b.cudnn.rnn.fp32_precision,
            )
        return flags
    import tensorflow as tf

    return {"tf32": tf.config.experimental.tensor_float_32_execution_enabled()}


def _tf32_off(flags) -> bool:
    return all(v in (False, "ieee", "none") for v in flags.values())


def _tf32_on(flags) -> bool:
    return all(v in (True, "tf32") for v in flags.values())


def _framework_defaults(framework) -> None:
    """Put the framework back on its own defaults where they allow TF32 (TensorFlow:
    enabled; torch: cuDNN allowed), as an unpinned process would have them."""
    if framework == "torch":
        import torch

        torch.backends.cudnn.allow_tf32 = True
    else:
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(True)


def test_tf32_is_a_config_variant_and_the_precision_columns_are_documented():
    import yaml

    schema = yaml.safe_load((REPO_ROOT / "workflow/schemas/config.schema.yaml").read_text())
    enum = schema["properties"]["sweep"]["properties"]["variants"]["items"]["enum"]
    assert "tf32" in VARIANTS and "tf32" in enum
    timings = table_columns("timings")
    at = timings.index("precision")
    assert timings[at : at + 2] == ("precision", "precision_settings")
    crossover = table_columns("crossover")
    at = crossover.index("precision")
    assert crossover[at : at + 2] == ("precision", "cpu_precision")


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_a_job_pins_fp32_and_its_rows_record_the_settings_read_back(framework, tmp_path):
    frameworks.import_framework(framework, "cpu", 1)
    _framework_defaults(framework)
    assert not _tf32_off(_tf32_flags(framework))  # the defaults allow TF32 somewhere
    rows = run_group(
        _group(framework, ["eager", "tf32"]),
        tmp_path / "j.jsonl",
        tmp_path / "out.csv",
        log=lambda _: None,
    )
    flags = _tf32_flags(framework)
    assert _tf32_off(flags), flags  # pinned by the job's import, read from the framework
    eager, tf32 = rows
    assert eager["status"] == "ok" and eager["precision"] == "fp32"
    settings = eager["precision_settings"]
    if framework == "torch":
        assert "torch.backends.cuda.matmul.allow_tf32=False" in settings
        assert "torch.backends.cudnn.allow_tf32=False" in settings
        if "matmul_fp32_precision" in flags:
            assert "torch.backends.cuda.matmul.fp32_precision=ieee" in settings
            assert "torch.backends.mkldnn.matmul.fp32_precision=ieee" in settings
    else:
        assert "tf.config.experimental.tensor_float_32_execution_enabled()=False" in settings
        assert "keras.mixed_precision.global_policy()=float32" in settings
    # tf32 on the CPU: not_applicable with the reason; nothing ran, so no precision.
    assert tf32["status"] == "not_applicable"
    assert "TF32 is a tensor-core format of NVIDIA GPUs (Ampere and later)" in tf32["message"]
    assert tf32.get("precision") is None
    table = pd.read_csv(tmp_path / "out.csv")
    assert list(table["precision"].fillna("")) == ["fp32", ""]
    assert table.loc[0, "precision_settings"] == settings


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
@pytest.mark.parametrize("found", [False, True])
def test_tf32_context_turns_tf32_on_and_restores_what_it_found(framework, found):
    frameworks.import_framework(framework, "cpu", 1)
    if found:
        _framework_defaults(framework)
        if framework == "torch":
            import torch

            torch.backends.cuda.matmul.allow_tf32 = True
    else:
        precision.pin_fp32(framework)
    before = _tf32_flags(framework)
    assert (_tf32_on if found else _tf32_off)(before), before
    try:
        with precision.tf32_enabled(framework):
            inside = _tf32_flags(framework)
            assert _tf32_on(inside), inside
            # On a GPU the read-back says tf32; on the CPU TF32 does not exist.
            assert precision.precision_in_effect(framework, "cuda") == "tf32"
            assert precision.precision_in_effect(framework, "cpu") == "fp32"
        assert _tf32_flags(framework) == before
        with pytest.raises(RuntimeError, match="inside"):
            with precision.tf32_enabled(framework):
                raise RuntimeError("a point failed inside the context")
        assert _tf32_flags(framework) == before
    finally:
        precision.pin_fp32(framework)


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_a_tf32_point_does_not_leak_into_the_next_point(framework, tmp_path, monkeypatch):
    # No GPU here: let the tf32 variant run on the CPU (its applicability check off) to
    # see the runner's context around a point that really runs, then an eager point.
    from crossover_study.study import applicability

    rules = tuple(r for r in applicability.RULES if r.name != "tf32")
    monkeypatch.setattr(applicability, "RULES", rules)
    rows = run_group(
        _group(framework, ["tf32", "eager", "tf32"]),
        tmp_path / "j.jsonl",
        tmp_path / "out.csv",
        log=lambda _: None,
    )
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"]
    flag = (
        "torch.backends.cudnn.allow_tf32"
        if framework == "torch"
        else "tf.config.experimental.tensor_float_32_execution_enabled()"
    )
    assert f"{flag}=True" in rows[0]["precision_settings"]
    assert f"{flag}=False" in rows[1]["precision_settings"]
    assert f"{flag}=True" in rows[2]["precision_settings"]
    # The CPU computes fp32 whatever the TF32 flags say.
    assert [r["precision"] for r in rows] == ["fp32", "fp32", "fp32"]
    assert _tf32_off(_tf32_flags(framework))


def test_tf32_on_a_device_without_it_is_not_applicable_before_the_device(tmp_path):
    # torch has no TPU backend: an eager point is unavailable, tf32 not_applicable.
    rows = run_group(
        _group("torch", ["eager", "tf32"], device="tpu"),
        tmp_path / "j.jsonl",
        tmp_path / "out.csv",
        log=lambda _: None,
    )
    assert [r["status"] for r in rows] == ["unavailable", "not_applicable"]
    assert rows[1]["message"] == (
        "TF32 is a tensor-core format of NVIDIA GPUs (Ampere and later); "
        "the TPU computes fp32 (= eager)"
    )


def test_tf32_on_cuda_without_a_gpu_is_unavailable_not_invented(tmp_path):
    rows = run_group(
        _group("torch", ["tf32"], device="cuda"),
        tmp_path / "j.jsonl",
        tmp_path / "out.csv",
        log=lambda _: None,
    )
    assert rows[0]["status"] == "unavailable" and rows[0].get("precision") is None


def test_torch_onednn_bf16_on_the_cpu_is_recorded_as_bf16():
    frameworks.import_framework("torch", "cpu", 1)
    if not precision.has_fp32_precision_api():
        pytest.skip("this torch has no fp32_precision (torch < 2.9)")
    import torch

    try:
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"
        columns = precision.row_columns("torch", "cpu")
        assert columns["precision"] == "bf16"
        assert "torch.backends.mkldnn.matmul.fp32_precision=bf16" in columns["precision_settings"]
    finally:
        precision.pin_fp32("torch")
    assert torch.backends.mkldnn.matmul.fp32_precision == "ieee"


@pytest.mark.parametrize(
    ("framework", "device", "settings", "expected"),
    [
        # torch before 2.9: the legacy booleans only.
        ("torch", "cuda", {"torch.backends.cuda.matmul.allow_tf32": "False",
                           "torch.backends.cudnn.allow_tf32": "True"}, "tf32"),
        ("torch", "cuda", {"torch.backends.cuda.matmul.allow_tf32": "False",
                           "torch.backends.cudnn.allow_tf32": "False"}, "fp32"),
        ("torch", "cpu", {"torch.backends.cuda.matmul.allow_tf32": "True",
                          "torch.backends.cudnn.allow_tf32": "True"}, "fp32"),
        # torch >= 2.9: cuDNN's RNN alone in TF32 makes the GPU row tf32.
        ("torch", "cuda_multi", {"torch.backends.cuda.matmul.fp32_precision": "ieee",
                                 "torch.backends.cudnn.conv.fp32_precision": "none",
                                 "torch.backends.cudnn.rnn.fp32_precision": "tf32"}, "tf32"),
        ("tensorflow", "cpu", {"tf.config.experimental.tensor_float_32_execution_enabled()": "True",
                               "keras.mixed_precision.global_policy()": "float32"}, "fp32"),
        ("tensorflow", "cuda", {"tf.config.experimental.tensor_float_32_execution_enabled()": "True",
                                "keras.mixed_precision.global_policy()": "float32"}, "tf32"),
        ("tensorflow", "tpu", {"tf.config.experimental.tensor_float_32_execution_enabled()": "True",
                               "keras.mixed_precision.global_policy()": "float32"}, "bf16"),
        ("tensorflow", "cuda", {"tf.config.experimental.tensor_float_32_execution_enabled()": "False",
                                "keras.mixed_precision.global_policy()": "mixed_float16"}, "fp16"),
    ],
)  # fmt: skip
def test_precision_in_effect_follows_the_settings(framework, device, settings, expected):
    assert precision.precision_in_effect(framework, device, settings) == expected


def test_precision_in_effect_refuses_what_it_cannot_tell():
    with pytest.raises(ValueError, match="unknown framework 'jax'"):
        precision.precision_in_effect("jax", "cpu", {})
    with pytest.raises(ValueError, match="unknown device class 'gpu'"):
        precision.precision_in_effect("torch", "gpu", {})
    unreadable = {
        "torch.backends.cuda.matmul.allow_tf32": "unreadable (mix of APIs)",
        "torch.backends.cudnn.allow_tf32": "False",
    }
    with pytest.raises(ValueError, match="cannot tell the precision"):
        precision.precision_in_effect("torch", "cuda", unreadable)
    with pytest.raises(ValueError, match="cannot tell the precision"):
        precision.precision_in_effect(
            "torch", "cpu", {"torch.backends.mkldnn.matmul.fp32_precision": "fp8"}
        )


def test_old_tables_without_precision_columns_still_load(tmp_path):
    source = COMMITTED_CPU_RUN / "timings.csv"
    header = list(pd.read_csv(source, nrows=0).columns)
    assert "precision" not in header  # recorded before the column existed
    table = collect_timings([source], tmp_path / "timings.csv")
    assert list(table.columns) == list(table_columns("timings"))
    assert table["precision"].isna().all() and len(table) == len(pd.read_csv(source))
    crossover = crossover_table(pd.read_csv(source), n_boot=20)
    assert crossover["precision"].isna().all() and crossover["cpu_precision"].isna().all()


def test_crossover_rows_name_the_precision_of_each_side():
    import json

    def rows(device, variant, times, status="ok", prec="fp32"):
        return [
            {
                "case": "s001-mlp",
                "framework": "torch",
                "device": device,
                "variant": variant,
                "batch": 64,
                "d_in": 1024,
                "hidden": h,
                "status": status,
                "message": None if status == "ok" else "TF32 is a tensor-core format",
                "step_time_s": t,
                "block_step_times_s": json.dumps([t, t, t]) if t else None,
                "cold_start_s": 0.1,
                "first_step_s": 0.01,
                "precision": prec if status == "ok" else None,
            }
            for h, t in zip([32, 128, 512], times, strict=True)
        ]

    timings = pd.DataFrame(
        rows("cpu", "eager", [3.2e-4, 1.28e-3, 5.12e-3])
        + rows("cuda", "eager", [2.56e-3] * 3)
        + rows("cpu", "tf32", [None] * 3, status="not_applicable")
        + rows("cuda", "tf32", [1.28e-3] * 3, prec="tf32")
    )
    table = crossover_table(timings, n_boot=20).set_index(["variant", "axis"])
    tf32 = table.loc[("tf32", "hidden")]
    assert (tf32["cpu_variant"], tf32["precision"], tf32["cpu_precision"]) == (
        "eager",
        "tf32",
        "fp32",
    )
    assert table.loc[("eager", "hidden"), "precision"] == "fp32"


def test_a_row_journaled_before_precision_was_pinned_is_measured_again(tmp_path):
    import dataclasses
    import hashlib
    import json

    group = _group("torch", ["eager"])
    # The fingerprint of the version before precision was pinned: threads and policy only.
    old = json.dumps(
        {"threads": group.threads, "policy": dataclasses.asdict(group.policy)}, sort_keys=True
    )
    old_settings = hashlib.sha256(old.encode()).hexdigest()[:12]
    assert old_settings != group.settings()
    key = group.points[0].key()
    old_row = {**group.points[0].as_row(), "status": "ok", "run_id": "before", "step_time_s": 1.0}
    journal = tmp_path / "j.jsonl"
    journal.write_text(
        json.dumps({"event": "done", "key": key, "settings": old_settings, "row": old_row}) + "\n"
    )
    said = []
    rows = run_group(group, journal, tmp_path / "out.csv", log=said.append)
    assert rows[0]["run_id"] != "before" and rows[0]["precision"] == "fp32"
    assert any("measured again" in line and "precision" in line for line in said)


def test_tf32_context_keeps_to_the_new_torch_api_where_the_legacy_one_is_refused():
    frameworks.import_framework("torch", "cpu", 1)
    if not precision.has_fp32_precision_api():
        pytest.skip("this torch has no fp32_precision (torch < 2.9)")
    import torch

    cudnn = torch.backends.cudnn
    try:
        # cuDNN's convolutions and RNNs set apart through the new API: torch 2.13
        # refuses the legacy cuDNN read (one boolean cannot say both).
        cudnn.conv.fp32_precision, cudnn.rnn.fp32_precision = "ieee", "tf32"
        with pytest.raises(RuntimeError, match="legacy and new APIs"):
            _ = cudnn.allow_tf32
        assert precision.precision_in_effect("torch", "cuda") == "tf32"  # the RNN may
        assert "unreadable" in precision.read_settings("torch")["torch.backends.cudnn.allow_tf32"]
        with precision.tf32_enabled("torch"):
            assert (cudnn.conv.fp32_precision, cudnn.rnn.fp32_precision) == ("tf32", "tf32")
            assert torch.backends.cuda.matmul.fp32_precision == "tf32"
        assert (cudnn.conv.fp32_precision, cudnn.rnn.fp32_precision) == ("ieee", "tf32")
        assert torch.backends.cuda.matmul.fp32_precision == "ieee"
    finally:
        precision.pin_fp32("torch")
    assert _tf32_off(_tf32_flags("torch"))


def test_a_precision_the_settings_do_not_tell_is_left_empty_not_guessed(monkeypatch):
    odd = {
        "torch.backends.cuda.matmul.allow_tf32": "unreadable (mix of APIs)",
        "torch.backends.cudnn.allow_tf32": "False",
    }
    monkeypatch.setattr(precision, "read_settings", lambda framework: odd)
    columns = precision.row_columns("torch", "cuda")
    assert columns["precision"] is None
    assert "allow_tf32=unreadable (mix of APIs)" in columns["precision_settings"]
