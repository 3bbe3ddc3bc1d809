"""The H200 card's predictions against the H200 anchors (docs/anchors/): how far a
prediction from published numbers lands from a measurement it was never fitted to.

    .venv/bin/python benchmarks/card_anchors.py [--card h200] [--out DIR]

The anchors measured PyTorch programs on an H200: s001-mlp's width sweep H = 8…8192 at
N = 64, D_in = 1024 and its 64 × 5000 × 5000 × 8 point, s000-hjb at batch 100 and
width 8, and at width 64 with batch 100, 10 000 and 1 000 000. This machine's CPU
counts and profiles each of those programs at those sizes in one small study (PyTorch,
eager, the CPU, quick timing: ``<out>/anchors.yaml``, run through the workflow up to
its ``predict`` rule in ``<out>``), and the card prices it (``predicted.csv``: eager
and its CUDA graph). Prints one Markdown row per anchor: program, size, variant, the
predicted low / central / high step, the anchor's measured step, central / measured −
1 and whether the measurement lies in the band; then the card's cold start against the
anchor's CUDA context start; then the published small steps found (DeepBench's LSTM
training rows on a V100), priced from their shapes (``--public-only``: those alone,
no study run). The anchors are read here only; nothing is tuned to them (a miss is a
miss: ``docs/VALIDATION.md``).

``--leave-one-out`` checks the bands as the cards' sources make them: for each source
that gives one value of a range spread over several sources (a per-call cost's
``values``), the card is taken without that source's values and the anchors priced
again; one line each with the anchors inside the band, the median and the largest error.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from crossover_study.analysis.card_prediction import predict_cards  # noqa: E402
from crossover_study.analysis.tables import read_timings  # noqa: E402
from crossover_study.core.progress import format_seconds  # noqa: E402
from crossover_study.stepmodel.card_model import Work, price_range  # noqa: E402
from crossover_study.study.device_cards import Card, load_cards  # noqa: E402

ANCHORS = ROOT / "docs" / "anchors" / "h200-2026-11-29.json"
#: Anchor rows -> (case, sizes the check is given, variant of the row).
DEV_VARIANT = {"cuda": "eager", "cuda_graph": "cuda_graph"}


def anchor_points(rows: list[dict]) -> list[dict]:
    """The anchors' GPU rows this study has programs for, as ``{case, sizes, variant,
    measured_s, label}`` (seconds per step; it/s rows inverted)."""
    points = []
    for r in rows:
        variant = DEV_VARIANT.get(r.get("dev"))
        if variant is None:
            continue
        if r["kind"] == "seed001":
            case, sizes = "s001-mlp", {"batch": r["N"], "d_in": r["D_in"], "hidden": r["H"]}
        elif r["kind"] == "seed001_big":
            case, sizes = "s001-mlp", {"batch": r["N"], "d_in": r["D_in"], "hidden": r["H"]}
        elif r["kind"] == "sweep_width":
            case, sizes = "s001-mlp", {"batch": 64, "d_in": 1024, "hidden": r["H"]}
        elif r["kind"] in ("seed000_hjb", "hjb_batch_sweep"):
            case, sizes = "s000-hjb", {"batch": r["batch"], "width": r["width"]}
        else:
            continue
        step = r["us_per_step"] * 1e-6 if "us_per_step" in r else 1.0 / r["it_per_s"]
        label = ", ".join(f"{k}={v}" for k, v in sizes.items())
        points.append(
            {"case": case, "sizes": sizes, "variant": variant, "measured_s": step, "label": label}
        )
    return points


#: The study that measures the anchors' programs at their sizes on this CPU.
STUDY = {
    "study": "anchors",
    "sweep": {"frameworks": ["torch"], "devices": ["cpu"], "variants": ["eager"]},
    "devices": {"cpu": {"threads": 2}},
    "timing": {
        "min_block_s": 0.01,
        "blocks": 3,
        "max_warmup_s": 0.1,
        "max_point_s": 1.0,
        "sync_check_s": 0.0,
    },
    "cases": {
        "s001-mlp": {
            "axes": {"d_in": [1024, 5000], "hidden": [8, 32, 128, 512, 2048, 5000, 8192]},
            "grid": ["d_in", "hidden"],
        },
        "s000-hjb": {
            "axes": {"batch": [100, 10000, 1000000], "width": [8, 64]},
            "grid": ["batch", "width"],
        },
    },
}


def study_timings(card: str, out: Path) -> pd.DataFrame:
    """The anchors' study (:data:`STUDY`, predicting on ``card``) run in ``out``
    through the workflow up to ``predicted.csv`` (kept when it is there already), and
    its timings table as the predictions read it (the counts and attribution joined)."""
    table = out / "results" / "anchors" / "predicted.csv"
    if not table.is_file():
        study = out / "anchors.yaml"
        study.write_text(yaml.safe_dump({**STUDY, "predict": [card]}, sort_keys=False))
        cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(out)]
        # The target first: --configfile takes every argument after it.
        cmd += [str(table.relative_to(out)), "--cores", "2", "--configfile", str(study)]
        env = {
            **os.environ,
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        }
        with (out / "study.log").open("w") as log:
            subprocess.run(cmd, cwd=out, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
    return read_timings(out / "results" / "anchors" / "timings.csv")


def anchor_rows(timings: pd.DataFrame, card: Card, points: list[dict]) -> list[dict]:
    """Each anchor point priced on ``card`` from this machine's counts: the point with
    ``low``, ``central``, ``high`` (seconds), ``regime``, ``error`` (central / measured
    − 1) and ``inside`` (the measurement between low and high); ``central`` None where
    the study has no priced point there."""
    table = predict_cards(timings, [card])
    rows = []
    for p in points:
        found = at(table, p["case"], p["sizes"], p["variant"])
        if found.empty:
            rows.append({**p, "central": None})
            continue
        r = found.iloc[0]
        low, mid, high = r["predicted_low_s"], r["predicted_step_s"], r["predicted_high_s"]
        rows.append(
            {**p, "low": low, "central": mid, "high": high, "regime": r["regime"],
             "error": mid / p["measured_s"] - 1, "inside": low <= p["measured_s"] <= high}
        )  # fmt: skip
    return rows


def summary(rows: list[dict]) -> str:
    """'inside the band at 19 of 20; |central/measured - 1| median 14%, largest 63%'."""
    priced = [r for r in rows if r["central"] is not None]
    if not priced:
        return "no anchor priced"
    errors = sorted(abs(r["error"]) for r in priced)
    inside = sum(r["inside"] for r in priced)
    return (
        f"inside the band at {inside} of {len(priced)}; |central/measured - 1| median "
        f"{errors[len(errors) // 2]:.0%}, largest {errors[-1]:.0%}"
    )


def at(table: pd.DataFrame, case: str, sizes: dict, variant: str) -> pd.DataFrame:
    """Priced rows of ``table`` for ``case`` at ``sizes`` as ``variant``."""
    rows = table[(table["case"] == case) & (table["variant"] == variant)]
    for axis, value in sizes.items():
        rows = rows[pd.to_numeric(rows[axis], errors="coerce") == value]
    return rows[rows["predicted_step_s"].notna()]


#: DeepBench's FP32 LSTM training rows on a V100 (DGX-1, CUDA 10.1, cuDNN 7.6;
#: results/train/DeepBench_NV_V100.xlsx of baidu-research/DeepBench): (hidden, batch,
#: time steps, forward + backward ms).
DEEPBENCH_LSTM = ((512, 16, 25, 2.197), (256, 16, 150, 9.836))


def lstm_work(hidden: int, batch: int, steps: int) -> Work:
    """One LSTM layer's training step (input size = hidden, as DeepBench's rows) as the
    cards price it, from its published shape rather than a CPU count: the input
    projection of all time steps as one product and the recurrent product per time step,
    forward; each product's two gradients backward; a gate kernel per time step each way;
    the two cuDNN calls as the host's operations."""
    gates = 4 * hidden
    fwd = [
        (2.0 * steps * batch * hidden * gates, 1.0),
        (2.0 * batch * hidden * gates, float(steps)),
    ]
    products = (*fwd, *fwd, *fwd)  # forward, gradient of the input, gradient of the weights
    flops = sum(f * n for f, n in products)
    gate_bytes = 4.0 * batch * gates * 3
    return Work(
        framework="torch", variant="eager", program="cudnn_lstm", ops=2.0, graph_ops=0.0,
        function_calls=0.0, kernels=6.0 + 2 * steps + 2 * steps, flops=flops,
        mem_bytes=gate_bytes * 2 * steps, syncs=0.0, host_s=0.0, products=products,
        elementwise=((gate_bytes, 2.0 * steps),),
    )  # fmt: skip


def public_rows() -> None:
    """The cards against the published small steps found (docs/VALIDATION.md)."""
    (v100,) = load_cards(["v100"])
    print(
        "\n| published step | card | predicted low / central / high | measured | error | in band |"
    )
    print("|---|---|---|---|---|---|")
    for hidden, batch, steps, ms in DEEPBENCH_LSTM:
        ends = price_range(lstm_work(hidden, batch, steps), v100)
        measured = ms * 1e-3
        low, mid, high = (ends[e].step_s for e in ("low", "central", "high"))
        print(
            f"| DeepBench LSTM FP32 hidden {hidden}, batch {batch}, {steps} steps, fwd+bwd | "
            f"{v100.card} | {format_seconds(low)} / {format_seconds(mid)} / "
            f"{format_seconds(high)} ({ends['central'].regime}) | {format_seconds(measured)} | "
            f"{mid / measured - 1:+.0%} | {'yes' if low <= measured <= high else 'no'} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--card", default="h200")
    parser.add_argument("--out", help="folder of the study (default: a temporary one)")
    parser.add_argument("--public-only", action="store_true", help="only the published steps")
    parser.add_argument(
        "--leave-one-out", action="store_true", help="the anchors priced without each source"
    )
    args = parser.parse_args(argv)
    if args.public_only:
        public_rows()
        return 0
    (card,) = load_cards([args.card])
    anchors = json.loads(ANCHORS.read_text())
    out = Path(args.out or tempfile.mkdtemp(prefix="card-anchors-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"card {card.card} ({card.name}); anchors {ANCHORS.name}: {anchors['machine']}")
    print(f"study in {out}\n")
    print(
        "| program | size | variant | predicted low / central / high | measured | error | in band |"
    )
    print("|---|---|---|---|---|---|---|")
    timings = study_timings(card.card, out)
    points = anchor_points(anchors["rows"])
    rows = anchor_rows(timings, card, points)
    for p in rows:
        if p["central"] is None:
            print(
                f"| {p['case']} | {p['label']} | {p['variant']} | not predicted (the study has "
                f"no point there) | {format_seconds(p['measured_s'])} | | |"
            )
            continue
        print(
            f"| {p['case']} | {p['label']} | {p['variant']} | {format_seconds(p['low'])} / "
            f"{format_seconds(p['central'])} / {format_seconds(p['high'])} ({p['regime']}) | "
            f"{format_seconds(p['measured_s'])} | {p['error']:+.0%} | "
            f"{'yes' if p['inside'] else 'no'} |"
        )
    cold = card.cost("context_start_s")
    measured = next((r["seconds"] for r in anchors["rows"] if r["kind"] == "cuda_init"), None)
    if cold is not None and measured is not None:
        inside = "yes" if cold.low <= measured <= cold.high else "no"
        print(
            f"| CUDA context start | | | {format_seconds(cold.low)} / {format_seconds(cold.central)}"
            f" / {format_seconds(cold.high)} | {format_seconds(measured)} | "
            f"{cold.central / measured - 1:+.0%} | {inside} |"
        )
    print(f"\n{card.card}, every source: {summary(rows)}")
    if args.leave_one_out:
        for source in card.spread_sources():
            left = anchor_rows(timings, card.without_source(source), points)
            print(f"{card.card} without {source}: {summary(left)}")
    public_rows()
    return 0


if __name__ == "__main__":
    sys.exit(main())
