"""Device cards (config/devices/): every card validates and names a source for every
number; the pricing of a step on a card (stepmodel.card_model) on synthetic counts whose
answer is known by hand; the answer's words for a launch-bound and a compute-bound
prediction; and no predicted number ever reaching a measured table or verdict."""

import copy
from dataclasses import replace

import pandas as pd
import pytest
import yaml

from crossover_study.analysis.card_beside import prediction_errors
from crossover_study.analysis.card_prediction import (
    predict_cards,
    predicted_crossovers,
    write_predictions,
)
from crossover_study.analysis.crossover import crossover_table
from crossover_study.answers.predicted import card_clause, check_line
from crossover_study.answers.predicted import main as devices_main
from crossover_study.core.files import write_csv_atomic
from crossover_study.core.origin import table_columns
from crossover_study.stepmodel.card_model import NotPriced, Work, price, price_range
from crossover_study.stepmodel.card_replicas import replica_share
from crossover_study.stepmodel.card_rnn import RnnCall, cudnn_rnn_kernels
from crossover_study.study.device_cards import (
    CARDS_DIR,
    DEFAULT_CARDS,
    CardError,
    all_cards,
    card_files,
    load_card_file,
    load_cards,
)

#: The accelerators the issue names, each a card.
NAMED = (
    "t4", "l4", "a10g", "v100", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200",
    "rtx-4090", "tpu-v2-8", "tpu-v3-8", "tpu-v5e",
    # the NVIDIA GPUs users most often ask about, beyond the clouds' current ones
    "gtx-1080", "gtx-1080-ti", "rtx-2080-ti", "rtx-3090", "rtx-4080", "rtx-4070",
    "quadro-rtx-6000", "rtx-a6000", "rtx-a4000", "k80", "p100",
)  # fmt: skip


def test_every_named_accelerator_has_a_card_that_validates():
    cards = all_cards()
    assert set(NAMED) <= set(cards)
    assert set(DEFAULT_CARDS) <= set(cards)
    for card in cards.values():
        assert card.raw["unknowns"], card.card


def test_every_number_names_a_defined_source_with_an_address():
    for card in all_cards().values():
        numbers = [
            *card.raw["datasheet"].values(),
            *card.raw["per_call"].values(),
            *card.raw["achievable"].values(),
        ]
        for entry in numbers:
            if not isinstance(entry, dict):
                continue  # host_link: words
            assert entry["sources"], (card.card, entry)
            assert entry["kind"] in ("datasheet", "published", "measured")
            for source in entry["sources"]:
                found = card.raw["sources"][source]
                assert found["url"].startswith("http"), (card.card, source)
                assert found["title"] and found["publisher"] and found["date"]
        # A number left empty says why.
        for key, entry in card.raw["datasheet"].items():
            if isinstance(entry, dict) and entry["value"] is None:
                assert entry.get("note"), (card.card, key)


def test_every_nvidia_card_names_how_two_of_it_exchange_data():
    """Every cuda card names its peer link and that link's one-way bandwidth (the number
    may be empty, with its note). A card whose peer link is NVLink (named first: "PCIe, or
    an NVLink bridge where fitted" is a PCIe link) is faster there than over its host
    link; one whose peer link is PCIe is at most its host link."""
    cuda = [c for c in all_cards().values() if c.family == "cuda"]
    assert cuda
    for card in cuda:
        sheet = card.raw["datasheet"]
        assert sheet.get("peer_link"), card.card
        assert "peer_link_bytes_per_s" in sheet, card.card
        link = sheet["peer_link"].split(",")[0]
        peer = sheet["peer_link_bytes_per_s"]["value"]
        host = sheet["host_link_bytes_per_s"]["value"]
        if "NVLink" in link:
            assert peer is not None and host is not None, card.card
            assert peer > host, (card.card, peer, host)
        else:
            assert link.startswith("PCIe"), (card.card, link)
            if peer is not None and host is not None:
                assert peer <= host, (card.card, peer, host)


def test_no_card_value_comes_from_the_h200_anchors():
    """The anchors only check predictions: no card cites them or marks a number as
    measured by this project."""
    for path in [*card_files(), *sorted((CARDS_DIR / "families").glob("*.yaml"))]:
        text = path.read_text()
        assert "h200-2026-11-29" not in text.split("unknowns")[0], path
        assert "kind: measured" not in text, path


def _write_card(tmp_path, **changes):
    """A copy of the T4 card (and its family) under ``tmp_path`` with ``changes``
    applied to the card's mapping by dotted key."""
    (tmp_path / "families").mkdir()
    family = (CARDS_DIR / "families" / "cuda.yaml").read_text()
    (tmp_path / "families" / "cuda.yaml").write_text(family)
    card = yaml.safe_load((CARDS_DIR / "t4.yaml").read_text())
    for dotted, value in changes.items():
        node = card
        *head, last = dotted.split(".")
        for key in head:
            node = node[key]
        node[last] = value
    path = tmp_path / "t4.yaml"
    path.write_text(yaml.safe_dump(card, sort_keys=False))
    return path


def test_a_card_breaking_its_schema_or_its_ranges_is_refused_naming_the_key(tmp_path):
    with pytest.raises(CardError, match=r"datasheet\.fp32_flop_per_s\.value"):
        load_card_file(_write_card(tmp_path, **{"datasheet.fp32_flop_per_s.value": "fast"}))


def test_a_range_whose_low_is_above_its_high_is_refused(tmp_path):
    path = _write_card(
        tmp_path,
        per_call={
            "sync_s": {"low": 2e-5, "high": 1e-5, "kind": "published", "sources": ["sysrq-t4"]}
        },
    )
    with pytest.raises(CardError, match=r"per_call\.sync_s: low 2e-05 is above high 1e-05"):
        load_card_file(path)


def test_a_number_naming_an_undefined_source_is_refused(tmp_path):
    path = _write_card(tmp_path, **{"datasheet.fp32_flop_per_s.sources": ["nowhere"]})
    with pytest.raises(CardError, match=r"\['nowhere'\] named but not defined"):
        load_card_file(path)


def test_an_unknown_card_name_lists_the_cards():
    with pytest.raises(CardError, match="no device card 't5'.*t4"):
        load_cards(["t5"])


def test_crossover_study_devices_lists_cards_with_their_sources(capsys):
    assert devices_main(["t4"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA T4" in out and "FP32 8.1 TFLOP/s" in out
    assert "[ocannl-488]" in out and "https://github.com/ahrefs/ocannl/issues/488" in out
    assert devices_main(["t5"]) == 2


# --------------------------------------------------------------------------- pricing
def _work(**changes) -> Work:
    """A synthetic PyTorch step: 40 host ops, 30 kernels (10 products of 1 MFLOP, 20
    element-wise calls of 4 kB), no Python of its own, no synchronisation."""
    base = dict(
        framework="torch",
        variant="eager",
        program="torch_step",
        ops=40.0,
        graph_ops=0.0,
        function_calls=0.0,
        kernels=30.0,
        flops=1e7,
        mem_bytes=8e4,
        syncs=0.0,
        host_s=0.0,
        products=((1e6, 10.0),),
        elementwise=((4e3, 20.0),),
    )
    base.update(changes)
    return Work(**base)


def _range(low, high):
    return {"low": low, "high": high, "kind": "published", "sources": ["s"]}


def _card(tmp_path, **per_call):
    """A card of round numbers: 10 TFLOP/s FP32, 20 TF32, 1 TB/s, fractions 1; every
    per-call cost 1–4 µs unless given."""
    costs = {
        k: _range(1e-6, 4e-6)
        for k in (
            "kernel_launch_s", "kernel_floor_s", "torch_eager_op_s", "tf_eager_op_s",
            "tf_graph_op_s", "tf_function_call_s", "sync_s", "cuda_graph_launch_s",
            "cuda_graph_kernel_s", "compiled_call_s", "xla_call_s", "context_start_s",
        )
    }  # fmt: skip
    costs.update(per_call)
    number = lambda v: {"value": v, "kind": "datasheet", "sources": ["s"], "note": "n"}  # noqa: E731
    card = {
        "card": "round",
        "name": "Round GPU",
        "device_class": "cuda",
        "family": "cuda",
        "summary": "test",
        "datasheet": {
            "fp32_flop_per_s": number(1e13),
            "tf32_flop_per_s": number(2e13),
            "bf16_flop_per_s": number(None),
            "fp16_flop_per_s": number(None),
            "memory_bytes": number(1e10),
            "memory_bandwidth_bytes_per_s": number(1e12),
            "host_link": "PCIe",
            "host_link_bytes_per_s": number(1e10),
        },
        "per_call": costs,
        "achievable": {"compute_fraction": _range(1.0, 1.0), "memory_fraction": _range(1.0, 1.0)},
        "unknowns": ["test"],
        "sources": {
            k: {"title": "t", "publisher": "p", "date": "2026", "url": "https://x"} for k in "su"
        },
    }
    (tmp_path / "families").mkdir(exist_ok=True)
    (tmp_path / "families" / "cuda.yaml").write_text("family: cuda\nper_call: {}\n")
    (tmp_path / "round.yaml").write_text(yaml.safe_dump(card))
    return load_card_file(tmp_path / "round.yaml", tmp_path / "families")


def test_a_small_step_is_launch_bound_at_its_host_ops(tmp_path):
    card = _card(tmp_path)
    central = price(_work(), card, end="central")
    # Host: 40 ops × 2 µs (geometric mean of 1–4 µs). Device: 10 products of 0.1 µs and
    # 20 copies of 4 ns, each held to the 2 µs floor: 30 × 2 µs.
    assert central.host_launch_s == pytest.approx(80e-6)
    assert central.device_s == pytest.approx(60e-6)
    assert central.step_s == pytest.approx(80e-6)
    assert central.regime == "launch-bound"
    low, high = price(_work(), card, end="low"), price(_work(), card, end="high")
    assert low.step_s == pytest.approx(40e-6) and high.step_s == pytest.approx(160e-6)


def test_a_torch_step_costs_at_least_its_ops_at_a_whole_steps_cost_per_op(tmp_path):
    """With a whole training step's cost per op on the card, a PyTorch eager step's host
    is its ops at that cost where that is more than its own work plus each op's bare
    dispatch; the Python the sources' steps hold is not added twice."""
    card = _card(tmp_path, torch_step_op_s=_range(1e-5, 4e-5))
    central = price(_work(host_s=1e-4), card, end="central")
    # 40 ops × 20 µs (geometric mean of 10–40 µs) = 800 µs, above 100 µs + 40 × 2 µs.
    assert central.host_s + central.host_launch_s == pytest.approx(800e-6)
    assert central.host_s == pytest.approx(1e-4) and central.host_basis == "step"
    assert central.step_s == pytest.approx(800e-6)
    low, high = (
        price(_work(host_s=1e-4), card, end="low"),
        price(_work(host_s=1e-4), card, end="high"),
    )
    assert low.step_s == pytest.approx(400e-6) and high.step_s == pytest.approx(1.6e-3)
    # A program whose own Python outweighs the traces' steps pays its own work instead.
    heavy = price(_work(host_s=5e-3), card, end="central")
    assert heavy.host_basis == "ops" and heavy.step_s == pytest.approx(5e-3 + 80e-6)
    # TensorFlow's ops keep their own per-op cost (no whole-step source for them).
    tf = price(_work(framework="tensorflow"), card, end="central")
    assert tf.host_basis == "ops" and tf.host_launch_s == pytest.approx(80e-6)


def test_a_band_spread_over_sources_is_checked_and_can_leave_one_out(tmp_path):
    values = [
        {"value": 1e-5, "source": "s", "what": "one thread"},
        {"value": 3e-5, "source": "u", "what": "another trace"},
        {"value": 2e-5, "source": "u", "what": "its other thread"},
    ]
    spread = {**_range(1e-5, 3e-5), "sources": ["s", "u"], "values": values}
    card = (
        _card(tmp_path / "a", torch_step_op_s=spread) if (tmp_path / "a").mkdir() is None else None
    )
    cost = card.cost("torch_step_op_s")
    assert (cost.low, cost.high) == (1e-5, 3e-5)
    assert card.spread_sources() == ["s", "u"]
    without_u = card.without_source("u").cost("torch_step_op_s")
    assert (without_u.low, without_u.high, without_u.sources) == (1e-5, 1e-5, ("s",))
    without_s = card.without_source("s").cost("torch_step_op_s")
    assert (without_s.low, without_s.high) == (2e-5, 3e-5)
    # The card itself is unchanged, and a range without values is left as it is.
    assert card.cost("torch_step_op_s").low == 1e-5
    assert card.without_source("u").cost("sync_s") == card.cost("sync_s")
    (tmp_path / "b").mkdir()
    with pytest.raises(CardError, match=r"torch_step_op_s: low and high are 1e-05 and 4e-05"):
        _card(tmp_path / "b", torch_step_op_s={**spread, "high": 4e-5})
    (tmp_path / "c").mkdir()
    stranger = [*values[:2], {"value": 2e-5, "source": "x", "what": "?"}]
    with pytest.raises(CardError, match=r"values name \['x'\], not among its sources"):
        _card(tmp_path / "c", torch_step_op_s={**spread, "values": stranger})


def test_replicas_split_the_work_and_add_the_gradients_all_reduce(tmp_path):
    """Two GPUs of a card: each runs half of MirroredStrategy's counted work (its counts are
    every replica's) or all of a DDP rank's (one replica's); the gradients' ring
    all-reduce is 2(N-1)/N of their bytes over the peer link plus the latency, added to
    the step and hidden behind it in the low estimate."""
    from crossover_study.stepmodel.card_replicas import allreduce_s, price_replicas

    card = _card(tmp_path, allreduce_latency_s=_range(1e-5, 1e-5))
    # 8 MB of gradients over the card's 1e10 B/s host link (no peer link named): 2·½·8e6/1e10.
    assert allreduce_s(card, 8e6, 2) == pytest.approx(1e-5 + 8e-4)
    mirrored = _work(variant="mirrored", framework="tensorflow", ops=80.0, kernels=60.0,
                     flops=2e7, products=((1e6, 20.0),), elementwise=((4e3, 40.0),))  # fmt: skip
    one = price(_work(framework="tensorflow"), card, end="central")
    two = price_replicas(mirrored, card, 2, 8e6, "central")
    assert two.device_s == pytest.approx(one.device_s)  # each GPU runs one replica's share
    assert two.host_launch_s == pytest.approx(2 * one.host_launch_s)  # one host, every op
    assert two.allreduce_s == pytest.approx(8.1e-4)
    assert two.step_s == pytest.approx(max(2 * one.host_launch_s, one.device_s) + 8.1e-4)
    assert two.regime == "communication-bound"
    low = price_replicas(mirrored, card, 2, 8e6, "low")
    assert low.step_s == pytest.approx(max(low.allreduce_s, low.device_s, low.host_launch_s))
    ddp = price_replicas(_work(variant="ddp"), card, 2, 8e3, "central")  # a rank's own counts
    assert ddp.device_s == pytest.approx(price(_work(), card).device_s)
    with pytest.raises(NotPriced, match="not a data-parallel variant"):
        price_replicas(_work(), card, 2, 8e6)
    with pytest.raises(NotPriced, match="one replica"):
        price_replicas(mirrored, card, 1, 8e6)


def test_a_replicated_point_is_priced_with_its_users_python_and_its_gradients():
    """Replicated programs are not profiled: their host's own work is the same case's
    eager Python (100 µs a step in these rows); two T4s all-reduce the row's gradients."""
    rows = _cpu_rows()
    seed = rows[rows["hidden"] == 128].iloc[0].to_dict()
    ddp = [
        {**seed, "variant": "ddp", "replicas": r, "scaling": s, "grad_bytes": 4.2e5,
         "attr_python_s": None, "attr_ops_s": None}
        for r, s in ((1, None), (2, "strong"))
    ]  # fmt: skip
    predicted = predict_cards(pd.concat([rows, pd.DataFrame(ddp)], ignore_index=True),
                              load_cards(["t4"]))  # fmt: skip
    mine = predicted[predicted["variant"] == "ddp"].set_index("replicas")
    assert set(mine.index) == {1, 2}
    assert mine.loc[1, "host_s"] == pytest.approx(1e-4)
    assert mine.loc[2, "device_class"] == "cuda_multi" and mine.loc[2, "allreduce_s"] > 0
    assert pd.isna(mine.loc[1, "allreduce_s"])


def test_a_seed_is_answered_on_its_own_accelerators(tmp_path):
    """s001-mlp's own devices: the K80 at the seed's size and the GTX 1080 at 5000 x 5000,
    each beside what its user saw; a study predicts them by default."""
    from crossover_study.answers.own_devices import own_device_sentence
    from crossover_study.study.config import load_config

    rows = _cpu_rows().assign(step_time_iqr_s=1e-5)
    big = rows.iloc[[3]].assign(d_in=5000, hidden=5000, step_time_s=0.12)
    predicted = predict_cards(
        pd.concat([rows, big], ignore_index=True), load_cards(["k80", "t4", "gtx-1080"])
    )
    text = own_device_sentence(predicted, "s001-mlp")
    k80_t4, gtx_seed, gtx = text.split("; the answer's GTX 1080")
    k80, t4 = k80_t4.split("; Colab's GPU since 2019 (a T4, ")
    assert t4.startswith(
        "where the seed's notebook runs today): its user saw the accelerator slower"
    )
    assert gtx_seed.startswith(": its user saw the accelerator faster, the loop 3.5 s")
    assert k80.startswith("Colab's GPU in 2018 (a K80, torch 0.4 with CUDA 8): its user saw")
    assert "predicted from the k80 card" in k80 and "against this machine's CPU's 200 µs" in k80
    assert "agrees with what its user saw" in k80 or "does not contradict" in k80
    assert " at d_in 5000, hidden 5000: its user saw the accelerator faster" in gtx
    assert "faster, which agrees with what its user saw" in gtx
    assert own_device_sentence(predicted, "s002-iris").endswith(
        "not predicted here (the study has no tensorflow CPU point there)."
    )
    # The default study predicts every seed's own accelerators beside its predict list.
    config = load_config(CARDS_DIR.parents[1] / "config" / "config.yaml")
    assert {"k80", "t4", "gtx-1080", "tpu-v2-8"} <= set(config["predict"])


def test_the_iris_seed_is_answered_on_colabs_tpu():
    """s002-iris's own accelerator is a TPU v2-8: the TPU's program (strategy_step) is
    priced there from the same program's CPU point, and the sentence sets it beside what
    its user saw."""
    from crossover_study.answers.own_devices import own_device_sentence

    row = {
        "case": "s002-iris", "framework": "tensorflow", "device": "cpu",
        "variant": "strategy_step", "timing": "synced", "status": "ok", "batch": 20,
        "hidden": 32, "axes": "batch,hidden", "program": "strategy_step",
        "step_time_s": 4e-4, "step_time_iqr_s": 2e-5, "step_ops": 60.0,
        "step_graph_ops": 58.0, "step_function_calls": 1.0, "step_flop_ops": 6.0,
        "step_mem_ops": 30.0, "step_flops": 1e5, "step_mem_bytes": 1e4,
        "loss_read_every": 1, "attr_ops_s": 3e-4, "attr_python_s": 1e-4,
    }  # fmt: skip
    predicted = predict_cards(pd.DataFrame([row]), load_cards(["tpu-v2-8"]))
    tpu = predicted[predicted["predicted_step_s"].notna()]
    assert list(tpu["variant"]) == ["strategy_step"] and tpu["device_class"].iloc[0] == "tpu"
    text = own_device_sentence(predicted, "s002-iris")
    assert text.startswith("Colab's TPU (a v2-8): its user saw the accelerator slower")
    # One remote call and a read back of 0.5-2.5 ms each against the CPU's 0.4 ms.
    assert "predicted from the tpu-v2-8 card" in text and "slower, which agrees" in text


def test_a_large_step_is_compute_bound_at_the_peak(tmp_path):
    card = _card(tmp_path)
    work = _work(flops=1e11, products=((1e10, 10.0),))
    central = price(work, card, end="central")
    # 10 products of 1e10 FLOP at 10 TFLOP/s: 10 ms; above the host's 80 µs.
    assert central.compute_s == pytest.approx(1e-2)
    assert central.step_s == pytest.approx(1e-2 + 20 * 2e-6)
    assert central.regime == "compute-bound"
    assert price(work, card, "tf32").compute_s == pytest.approx(5e-3)


def test_python_of_its_own_makes_a_step_host_bound(tmp_path):
    central = price(_work(host_s=1e-3), _card(tmp_path))
    assert central.step_s == pytest.approx(1e-3 + 80e-6)
    assert central.regime == "host-bound"


def test_a_sync_every_step_adds_its_round_trip(tmp_path):
    card = _card(tmp_path, sync_s=_range(1e-5, 1e-5))
    assert price(_work(syncs=1.0), card).step_s == pytest.approx(80e-6 + 1e-5)


def test_a_cuda_graph_replays_the_kernels_with_one_launch(tmp_path):
    card = _card(
        tmp_path, cuda_graph_launch_s=_range(1e-5, 1e-5), cuda_graph_kernel_s=_range(5e-7, 5e-7)
    )
    graph = price(_work(host_s=5e-4), card, "cuda_graph")
    # The host's Python does not run in a replay; 30 kernels at 0.5 µs = 15 µs.
    assert graph.host_s == 0 and graph.host_launch_s == pytest.approx(1e-5)
    assert graph.step_s == pytest.approx(15e-6)


def _gru_work(**changes) -> Work:
    """:func:`_work` plus one GRU call (T = 10, B = 4, I = 3, H = 5, one layer) as the CPU
    ran it: 600 ATen ops, 400 kernels (100 gate products of 600 FLOP, 300 element-wise
    calls of 1 kB), all inside the step's counts."""
    gru = RnnCall(
        kind="GRU", steps=10, batch=4, inputs=3, hidden=5, layers=1, directions=1,
        backward=True, elem_bytes=4, ops=600.0, kernels=400.0, mem_bytes=3e5,
        products=((600.0, 100.0),), elementwise=((1e3, 300.0),), per_step=1.0,
    )  # fmt: skip
    base = dict(
        ops=640.0, kernels=430.0, mem_bytes=8e4 + 3e5,
        products=((1e6, 10.0), (600.0, 100.0)), elementwise=((4e3, 20.0), (1e3, 300.0)),
        rnn=(gru,),
    )  # fmt: skip
    base.update(changes)
    return _work(**base)


def test_a_recurrent_layer_is_priced_as_cudnn_runs_it(tmp_path):
    """A GRU the CPU ran as ops per time step is priced on a CUDA card as cuDNN runs it
    (Appleyard, Kočiský and Blunsom 2016): one host op forward and one backward, and per
    layer and direction an input GEMM, T recurrent GEMMs and T fused element-wise kernels
    forward, T of each backward and three GEMMs over all steps (input and weight
    gradients)."""
    card = _card(tmp_path)
    gemms, fused = cudnn_rnn_kernels(_gru_work().rnn[0])
    t, b, i, h = 10, 4, 3, 5
    assert sum(n for _, n in gemms) == 1 + t + t + 3
    assert sum(n for _, n in fused) == 2 * t
    assert (2.0 * t * b * i * 3 * h, 1.0) in gemms  # the input projection over all steps
    assert (2.0 * b * h * 3 * h, float(t)) in gemms  # one recurrent GEMM per step
    assert sum(f * n for f, n in gemms) == pytest.approx(3 * (2 * t * b * 3 * h * (i + h)))
    after = price(_gru_work(), card)
    # The GRU's 600 ops become 2: 42 host ops × 2 µs; its 400 kernels become 4T + 4 = 44,
    # beside the step's other 30: 74 kernels, each at the 2 µs floor.
    assert after.host_launch_s == pytest.approx(42 * 2e-6)
    assert after.kernels == pytest.approx(30 + 44)
    assert after.device_s == pytest.approx(74 * 2e-6)
    assert after.step_s == pytest.approx(74 * 2e-6) and after.regime == "launch-bound"
    before = price(_gru_work(rnn=()), card)  # the same counts without the module noted
    assert before.host_launch_s == pytest.approx(640 * 2e-6) and before.kernels == 430
    # Two layers, both directions: 2 × 2 × (4T + 4) kernels; the second layer's input is
    # both directions' hidden states.
    deep = replace(_gru_work().rnn[0], layers=2, directions=2)
    gemms, fused = cudnn_rnn_kernels(deep)
    assert sum(n for _, n in gemms + fused) == 4 * (4 * t + 4)
    assert (2.0 * t * b * (2 * h) * 3 * h, 1.0) in gemms
    # One replica's share of a step counted for two holds half of each call.
    assert replica_share(_gru_work(), 2).rnn[0].per_step == 0.5


def test_compile_fuses_element_wise_kernels_into_a_band(tmp_path):
    card = _card(tmp_path)
    ends = price_range(_work(), card, "compile")
    # Kernels: from the 10 products + 1 (low) to the 30 eager ones (high).
    assert ends["low"].kernels == pytest.approx(11)
    assert ends["high"].kernels == pytest.approx(30)
    assert ends["low"].step_s <= ends["central"].step_s <= ends["high"].step_s


def test_modes_a_device_has_not_are_not_priced_with_the_reason(tmp_path):
    t4, tpu = load_cards(["t4", "tpu-v3-8"])
    with pytest.raises(NotPriced, match="no TF32"):
        price(_work(), t4, "tf32")
    with pytest.raises(NotPriced, match="no TPU backend"):
        price(_work(), tpu)
    with pytest.raises(NotPriced, match="copies are not priced"):
        price(_work(), t4, "copy_data_each_step")
    tf = price(_work(framework="tensorflow", function_calls=1.0, graph_ops=40.0), tpu)
    assert tf.regime in ("launch-bound", "host-bound")
    # One remote TPU call per step: at least the card's low end.
    assert tf.step_s >= 5.24e-4


# --------------------------------------------------------------------- the tables
def _cpu_rows():
    """s001-mlp CPU points along hidden (torch eager), with the counts a prediction
    reads: small steps launch-bound, the largest one compute-bound."""
    rows = []
    for hidden, step in ((32, 1.5e-4), (128, 2e-4), (512, 3e-3), (8192, 2e-1)):
        flops = 2.0 * 64 * 1024 * hidden * 3
        rows.append(
            {
                "case": "s001-mlp", "framework": "torch", "device": "cpu", "variant": "eager",
                "timing": "synced", "status": "ok", "batch": 64, "d_in": 1024, "hidden": hidden,
                "axes": "batch,d_in,hidden", "program": "torch_step", "step_time_s": step,
                "cold_start_s": 0.8, "first_step_s": 0.02, "step_ops": 38.0, "step_flop_ops": 8.0,
                "step_mem_ops": 24.0, "step_flops": flops, "step_mem_bytes": 5e6,
                "step_graph_ops": 0.0, "step_function_calls": 0.0, "loss_read_every": 1000,
                "attr_python_s": 1e-4, "attr_data_s": 0.0, "attr_fit_s": 0.0,
                "attr_ops_s": step - 1e-4,
                "step_products": None, "step_elementwise": None,
            }
        )  # fmt: skip
    return pd.DataFrame(rows)


def test_predicted_rows_carry_a_band_a_regime_and_the_cpu_they_came_from():
    predicted = predict_cards(_cpu_rows(), load_cards(["t4", "h100-sxm"]))
    priced = predicted[predicted["predicted_step_s"].notna()]
    assert set(priced["variant"]) == {"eager", "cuda_graph", "tf32"}  # tf32 on the H100 only
    assert (priced["predicted_low_s"] <= priced["predicted_step_s"]).all()
    assert (priced["predicted_step_s"] <= priced["predicted_high_s"]).all()
    assert set(predicted["kind"]) == {"prediction"}
    t4_tf32 = predicted[(predicted["card"] == "t4") & (predicted["variant"] == "tf32")]
    assert t4_tf32["not_priced"].str.contains("no TF32").all()
    small = priced[
        (priced["card"] == "t4") & (priced["hidden"] == 32) & (priced["variant"] == "eager")
    ]
    assert small["regime"].iloc[0] == "launch-bound"
    large = priced[
        (priced["card"] == "t4") & (priced["hidden"] == 8192) & (priced["variant"] == "eager")
    ]
    assert large["speedup"].iloc[0] > 1


def test_a_predicted_crossover_is_placed_with_its_interval():
    """The CPU takes 150 and 200 µs at hidden 32 and 128, where every estimate of the T4
    is slower (at least 38 ops × 3.3 µs + 100 µs of Python), and 3 ms at 512, where
    every estimate is faster: each curve crosses between 128 and 512, the fast one
    first."""
    predicted = predict_cards(_cpu_rows(), load_cards(["t4"]))
    crossovers = predicted_crossovers(predicted)
    row = crossovers[(crossovers["variant"] == "eager") & (crossovers["axis"] == "hidden")].iloc[0]
    assert row["outcome"] == row["low_outcome"] == row["high_outcome"] == "crossover"
    assert 128 < row["crossover_low"] <= row["crossover_size"] <= row["crossover_high"] < 512
    assert row["kind"] == "prediction"


def test_a_direction_is_said_only_where_the_band_lies_on_one_side_of_the_cpu():
    from crossover_study.analysis.card_prediction import cpu_interval, direction

    assert direction(1e-4, 2e-4, 3e-4, 4e-4) == "faster"
    assert direction(5e-4, 6e-4, 3e-4, 4e-4) == "slower"
    assert direction(2e-4, 3.5e-4, 3e-4, 4e-4) == "undecided"
    # The CPU's spread: a merged point's prediction interval, else its middle half.
    row = pd.Series({"step_time_s": 1e-3, "step_time_iqr_s": 2e-4})
    assert cpu_interval(row) == pytest.approx((9e-4, 1.1e-3))
    merged = row.copy()
    merged["step_time_pi_low_s"], merged["step_time_pi_high_s"] = 8e-4, 1.3e-3
    assert cpu_interval(merged) == (8e-4, 1.3e-3)
    assert cpu_interval(pd.Series({"step_time_s": 1e-3})) == (1e-3, 1e-3)

    rows = _cpu_rows().assign(step_time_iqr_s=1e-5)
    close = rows.assign(step_time_s=rows["step_time_s"].where(rows["hidden"] != 128, 7e-4))
    predicted = predict_cards(close, load_cards(["t4"]))
    eager = predicted[(predicted["variant"] == "eager") & (predicted["hidden"] == 128)].iloc[0]
    assert eager["predicted_low_s"] < 7e-4 < eager["predicted_high_s"]
    assert eager["direction"] == "undecided"
    words = card_clause(predicted, None, "s001-mlp", "t4")
    assert "too close to call without measuring: the T4 would take" in words
    assert "against the CPU's measured 700 µs (695 µs–705 µs)" in words
    assert "faster (" not in words.split("as a CUDA graph")[0]
    assert "too close to call against the CPU's 700 µs" in check_line(predicted, "s001-mlp", "t4")
    slow = predict_cards(_cpu_rows().assign(step_time_iqr_s=1e-5), load_cards(["t4"]))
    row = slow[(slow["variant"] == "eager") & (slow["hidden"] == 128)].iloc[0]
    assert row["direction"] == "slower" and row["predicted_low_s"] > row["cpu_high_s"]
    assert "the CPU stays" in card_clause(slow, None, "s001-mlp", "t4")


def test_no_predicted_number_reaches_the_measured_tables_or_verdicts(tmp_path):
    timings = _cpu_rows()
    before = crossover_table(timings, n_boot=50)
    timings_csv = tmp_path / "timings.csv"
    write_csv_atomic(timings.to_dict("records"), table_columns("timings"), timings_csv)
    text = timings_csv.read_text()
    predicted, _ = write_predictions(
        timings_csv, load_cards(DEFAULT_CARDS), tmp_path / "predicted.csv", tmp_path / "pc.csv"
    )
    # The measured table is untouched and the crossover computed from it is the same.
    assert timings_csv.read_text() == text
    pd.testing.assert_frame_equal(crossover_table(timings, n_boot=50), before)
    assert not (set(predicted.columns) & {"step_time_s", "status", "device"})
    assert before.empty or (before["outcome"] == "no_accelerator_data").all()


def test_a_prediction_is_set_beside_a_measurement_of_its_device():
    timings = _cpu_rows()
    predicted = predict_cards(timings, load_cards(["h200"]))
    gpu = timings.copy().assign(device="cuda", device_name="NVIDIA H200", step_time_s=9e-4)
    errors = prediction_errors(predicted, pd.concat([timings, gpu]))
    eager = errors[errors["variant"] == "eager"]
    assert len(eager) == 4
    expected = eager["predicted_step_s"] / 9e-4 - 1
    assert eager["prediction_error"].tolist() == pytest.approx(expected.tolist())


def test_the_answer_words_a_launch_bound_and_a_compute_bound_prediction():
    predicted = predict_cards(_cpu_rows(), load_cards(["t4"]))
    seed = card_clause(predicted, None, "s001-mlp", "t4")
    assert seed.startswith("on NVIDIA T4 (predicted from its card, not measured): with torch about")
    assert "launch-bound: 38 host operations at about" in seed
    assert "inside whole training steps on a GPU" in seed
    assert "as a CUDA graph about" in seed
    large = predicted.copy()
    large = large[large["hidden"] == 8192].assign(hidden=128)  # the large point at the seed's size
    words = card_clause(large, None, "s001-mlp", "t4")
    assert "compute-bound: the products' arithmetic sets the pace" in words
    line = check_line(predicted, "s001-mlp", "t4")
    assert line.startswith("T4 (predicted from its card):") and "launch-bound" in line


def test_a_study_file_names_unknown_cards_before_any_work():
    from crossover_study.study.config import load_config, validate_config
    from crossover_study.study.study_file import ConfigError

    config = load_config(CARDS_DIR.parents[1] / "config" / "studies" / "smoke.yaml")
    bad = copy.deepcopy(config)
    bad["predict"] = ["t4", "gtx-9090"]
    with pytest.raises(ConfigError, match=r"predict\[1\]: no device card 'gtx-9090'"):
        validate_config(bad)


def test_the_report_says_how_far_a_card_was_from_its_measured_device():
    from crossover_study.analysis.card_beside import measured_cards
    from crossover_study.answers.predicted import beside_sentence

    timings = _cpu_rows()
    gpu = timings.copy().assign(device="cuda", device_name="NVIDIA H200", step_time_s=9e-4)
    both = pd.concat([timings, gpu], ignore_index=True)
    cards = measured_cards(both, all_cards().values())
    assert [c.card for c in cards] == ["h200"]
    errors = prediction_errors(predict_cards(timings, cards), both)
    text = beside_sentence(errors[errors["variant"] == "eager"])
    assert text.startswith(
        "the NVIDIA H200 card's prediction was within 25% of the measurement at "
    )
    assert "of 4 points" in text and "farthest: s001-mlp torch/eager at " in text


def test_a_card_s_per_call_costs_are_set_beside_what_a_gpu_trace_measured():
    """Issue 53: on the first GPU run, the card's launch, kernel and sync costs beside the
    device attribution's (a synthetic H200 row here: 40 kernels launched in 200 µs, a
    median kernel of 3 µs, one sync waited 30 µs)."""
    from crossover_study.analysis.card_beside import trace_beside_cards

    gpu = _cpu_rows().iloc[[1]].assign(
        device="cuda", device_name="NVIDIA H200", attr_kernels=40.0, attr_launch_s=2e-4,
        attr_kernel_median_s=3e-6, attr_syncs=1.0, attr_sync_wait_s=3e-5,
    )  # fmt: skip
    table = trace_beside_cards(pd.concat([_cpu_rows(), gpu]), all_cards().values())
    got = {r.cost: (r.measured_s, r.within) for r in table.itertuples()}
    assert set(table["card"]) == {"h200"}
    assert got["kernel_launch_s"] == (pytest.approx(5e-6), True)  # inside 2.6–9.1 µs
    assert got["kernel_floor_s"] == (pytest.approx(3e-6), True)  # inside 2.51–6 µs
    assert got["sync_s"] == (pytest.approx(3e-5), False)  # outside 3.7–10 µs: a miss, said
    assert trace_beside_cards(_cpu_rows(), all_cards().values()).empty


def test_the_report_words_a_card_beside_a_trace():
    from crossover_study.answers.predicted import trace_sentence

    table = pd.DataFrame(
        [{"card": "h200", "cost": "sync_s", "what": "a synchronisation's wait (host)",
          "card_low_s": 3.7e-6, "card_high_s": 1e-5, "measured_s": 3e-5, "rows": 1, "within": False}]
    )  # fmt: skip
    assert trace_sentence(table) == (
        "the h200 card gives 3.7 µs–10 µs for a synchronisation's wait (host), the trace "
        "measured 30 µs (outside: a miss)"
    )
    assert trace_sentence(table.iloc[0:0]) == ""
