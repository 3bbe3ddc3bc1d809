"""The answer of ``crossover-study check`` (:mod:`crossover_study.quickcheck.command`): what a person
reads in ten seconds, from the check's own ``timings.csv`` and ``crossover.csv``.

Per device the steady step time (median over timed blocks, s) with its interval (the
blocks' interquartile range), cold start and first step (s); the verdict (which device
is faster at this size and by how much, or indistinguishable within noise: the report's
rule, :func:`answer_rows.seed_verdict`, the 95 % bootstrap interval of the ratio of the
two devices' block medians contains 1); why (the report's
regime clause, :func:`answer_regime.regime_clause`); the remedies ranked by measured
speed-up over eager on each device and whether one flips the verdict; predictions for
absent device classes from each committed reference run
(:func:`step_reference.predict_references`, labelled as predictions naming the
reference); and the one command of the full sweep. Every number is read from the
tables and only rounded for display.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from crossover_study.analysis.prediction import predict_references
from crossover_study.answers.page_faults import page_fault_short
from crossover_study.answers.phrasebook import (
    FASTER,
    MARGIN,
    TIED,
    TIED_RULE,
    device_label,
    faster_device,
    faster_or_slower,
    times,
)
from crossover_study.answers.predicted import card_verdict, check_line
from crossover_study.answers.regime import regime_clause
from crossover_study.answers.remedies import (
    ANTI_PATTERNS,
    APART,
    NOT_SAME_PROGRAM,
    not_same_program,
    remedy_table,
    variant_speedup,
    within_noise_text,
)
from crossover_study.answers.rows import seed_verdict
from crossover_study.answers.sentences import answer_sentence, prediction_text
from crossover_study.answers.summary import block_quartiles, measured_shares
from crossover_study.core.files import REFERENCE_DIR as REFERENCE_RUNS
from crossover_study.core.paths import REPO_ROOT, shown_path
from crossover_study.core.progress import format_seconds, one_line
from crossover_study.study.spec import DEVICES, seed_sizes, select_rows, synced

#: The most characters of a failed variant's message in a printed line (a table written
#: before messages were one line may hold a whole multi-line exception).
ERROR_CHARS = 300
#: Where the committed reference runs are (their ``timings.csv`` price predictions).
REFERENCE_DIR = REPO_ROOT / REFERENCE_RUNS


def _at_size(timings: pd.DataFrame, case: str) -> pd.DataFrame:
    """Synced rows of ``case``, of every status, at its seed size (the check's size):
    the study's one selection (:func:`spec.select_rows`)."""
    return synced(select_rows(timings, case, status=None))


def _device(rows: pd.DataFrame, device: str) -> dict:
    """One device's eager numbers at the size: status, step time, interval, cold start,
    first step, blocks (seconds; None where not measured) and the message."""
    mine = rows[(rows["device"] == device) & (rows["variant"] == "eager")]
    if mine.empty:
        return {"status": "not measured"}
    row = mine.iloc[0]
    if row["status"] != "ok":
        return {"status": row["status"], "message": row.get("message")}
    q = block_quartiles(row)
    return {
        "status": "ok",
        "step_time_s": float(row["step_time_s"]),
        "q1_s": q[0] if q else None,
        "q3_s": q[1] if q else None,
        "n_blocks": int(row["n_blocks"]),
        "cold_start_s": float(row["cold_start_s"]),
        "first_step_s": float(row["first_step_s"]),
        "noisy": bool(row.get("noisy")) if pd.notna(row.get("noisy")) else None,
    }


def _verdict(rows: pd.DataFrame, devices: dict, crossover: pd.DataFrame) -> dict | None:
    """The faster device at this size and by how much (ratio of medians), or tied
    (``faster`` None) where the report would call them indistinguishable: the one
    verdict of :func:`answer_rows.seed_verdict` on the eager rows of ``rows`` (the
    check's rows at its size) and ``crossover`` (the check's crossover table). None with
    fewer than two measured devices. The first accelerator measured is compared with
    the CPU."""
    ok = [d for d in DEVICES if devices.get(d, {}).get("status") == "ok"]
    if "cpu" not in ok or len(ok) < 2:
        return None
    acc = ok[1]
    ratio = devices["cpu"]["step_time_s"] / devices[acc]["step_time_s"]
    eager = rows[(rows["variant"] == "eager") & (rows["status"] == "ok")]
    cpu_row, acc_row = (eager[eager["device"] == d].iloc[0] for d in ("cpu", acc))
    mine = crossover
    if not crossover.empty and {"case", "framework", "variant", "accelerator"} <= set(crossover):
        mine = crossover[
            (crossover["case"] == cpu_row["case"])
            & (crossover["framework"] == cpu_row["framework"])
            & (crossover["variant"] == "eager")
            & (crossover["accelerator"] == acc)
        ]
    verdict = seed_verdict(mine, cpu_row, acc_row)
    faster = None if verdict == TIED else (acc if verdict == FASTER else "cpu")
    return {"accelerator": acc, "cpu_over_accelerator": ratio, "faster": faster}


def _remedies(rows: pd.DataFrame) -> dict[str, list[dict]]:
    """Per device, every other variant's ok step time against eager's at the size, the
    largest speed-up first, with its paired speed-up and 95 % interval where its blocks
    were interleaved with eager's (``speedup_low``, ``speedup_high``, ``interleaved``:
    :func:`answer_remedies.variant_speedup`); ``remedy`` False for the anti-patterns,
    for a variant that computes something else than the step as written
    (``same_program`` False: ``differs`` True) and for one not offered by the remedy
    rule (:func:`answer_remedies.remedy_table`: the interval's lower end above
    1 + :data:`answer_remedies.MARGIN`; noise is not sold as a remedy)."""
    found: dict[str, list[dict]] = {}
    for device in [d for d in DEVICES if d in set(rows["device"])]:
        mine = rows[(rows["device"] == device) & (rows["status"] == "ok")]
        times = pd.to_numeric(mine.set_index("variant")["step_time_s"], errors="coerce")
        if "eager" not in times:
            continue
        eager = float(times["eager"])
        differ = not_same_program(mine)
        table = remedy_table(mine)
        by_variant = mine.drop_duplicates("variant").set_index("variant")
        listed = []
        for v, t in times.drop("eager").items():
            entry = variant_speedup(by_variant.loc[v], eager, float(t))
            listed.append(
                {
                    "variant": v,
                    "step_time_s": float(t),
                    **{
                        k: (None if k != "interleaved" and pd.isna(x) else x)
                        for k, x in entry.items()
                    },
                    "differs": v in differ,
                    "remedy": bool(v in table.index and table.loc[v, "offered"]),
                }
            )
        found[device] = sorted(listed, key=lambda r: -r["speedup"])
        for entry in rows[(rows["device"] == device) & (rows["status"] == "error")].itertuples():
            found[device].append(
                {"variant": entry.variant, "status": "error", "message": entry.message}
            )
    return found


def _flip(devices: dict, remedies: dict, verdict: dict | None) -> str:
    """Whether the fastest remedy of each device changes which device is faster."""
    if verdict is None:
        return "only one device was measured: no verdict for a remedy to flip"
    acc = verdict["accelerator"]
    best = {}
    for device in ("cpu", acc):
        offered = [r["step_time_s"] for r in remedies.get(device, []) if r.get("remedy")]
        best[device] = min([devices[device]["step_time_s"], *offered])
    winner = acc if best[acc] < best["cpu"] else "cpu"
    each = f"CPU {format_seconds(best['cpu'])}, {device_label(acc)} {format_seconds(best[acc])}"
    if verdict["faster"] in (None, winner):
        return f"no remedy flips the verdict (best of each: {each})"
    return f"a remedy flips it: with each device's best remedy {device_label(winner)} is faster ({each})"


def _short_why(rows: pd.DataFrame) -> str:
    """'on the CPU, framework ops 74%, Python 26% of the step (measured)': the two largest
    measured shares of each measured device's eager step (:func:`summary.measured_shares`)."""
    texts = []
    for device in DEVICES:
        mine = rows[
            (rows["device"] == device) & (rows["variant"] == "eager") & (rows["status"] == "ok")
        ]
        if mine.empty:
            continue
        shares = measured_shares(mine.iloc[0], top=2)
        faults = page_fault_short(mine.iloc[0])  # issue 51: a heap that maps memory afresh
        if shares:
            texts.append(
                f"on the {device_label(device)}, {shares} of the step"
                + (f"; {faults}" if faults else "")
            )
    return "; ".join(texts) + " (measured)" if texts else ""


def answer(
    timings: pd.DataFrame,
    crossover: pd.DataFrame,
    case: str,
    absent: dict,
    sweep: Path,
    predicted: pd.DataFrame | None = None,
) -> dict:
    """The check's answer as a JSON-ready dict (see the module docstring): ``sizes``,
    ``devices`` (per class: the eager numbers, seconds), ``absent`` (class: why),
    ``verdict``, ``why``, ``remedies`` and ``flip``, ``predictions`` (per absent class:
    a committed reference run's prediction, or why there is none), ``card_predictions``
    (per device card of ``predicted``, :func:`card_prediction.predict_cards`'s table:
    its one line, labelled as a prediction), ``card_verdicts`` (per card, the naive
    program's numbers and ``direction``: faster, slower or undecided,
    :func:`predicted.card_verdict`), ``sentence`` (the report's answer
    sentence), ``sweep_command``."""
    rows = _at_size(timings, case)
    devices = {d: _device(rows, d) for d in DEVICES if d in set(rows["device"]) and d not in absent}
    verdict = _verdict(rows, devices, crossover)
    remedies = _remedies(rows[rows["device"].isin(list(devices))])
    references = sorted(REFERENCE_DIR.glob("*/timings.csv"))
    on_reference = predict_references(timings, references) if references else pd.DataFrame()
    cards = predicted if predicted is not None else pd.DataFrame(columns=["card"])
    card_lines = {c: check_line(cards, case, c) for c in dict.fromkeys(cards["card"])}
    carded = set(cards.get("device_class", pd.Series(dtype=str)))
    predictions = {}
    for device in absent:
        mine = (
            on_reference[on_reference["device"] == device]
            if not on_reference.empty
            else on_reference
        )
        text = prediction_text(mine, case) if not mine.empty else ""
        names = ", ".join(p.parent.name for p in references) or "none committed"
        if text or device not in carded:
            predictions[device] = text or (
                f"no prediction for {device_label(device)} from a measured reference: no committed "
                f"reference run measured it with {timings['framework'].iloc[0]} (reference "
                f"runs: {names}); no device card of its class was asked for (--predict)"
            )
    shown = shown_path(sweep.resolve())  # as the user types it
    return {
        "case": case,
        "framework": str(timings["framework"].iloc[0]),
        "sizes": seed_sizes(case),
        "devices": devices,
        "absent": absent,
        "verdict": verdict,
        "why": regime_clause(timings, case),
        "why_short": _short_why(rows),
        "remedies": remedies,
        "flip": _flip(devices, remedies, verdict),
        "predictions": predictions,
        "card_predictions": {c: line for c, line in card_lines.items() if line},
        "card_verdicts": {
            c: found for c in card_lines if (found := card_verdict(cards, case, c)) is not None
        },
        "sentence": answer_sentence(timings, crossover, case),
        "sweep_command": f"make study STUDY={shown}",
    }


def _remedy_text(r: dict) -> str:
    """'compile 1.82× faster, 95 % CI 1.75–1.90 (1.7 ms)', '... 3× slower (...)', 'read_loss_every_1000
    no different from eager within noise (0.97×, 95 % CI 0.90–1.05; 1.7 ms)', an error row's message."""
    if r.get("status") == "error":
        return f"{r['variant']} error ({one_line(r.get('message'), ERROR_CHARS)})"
    speedup = r["speedup"]
    paired = bool(r.get("interleaved"))
    if paired and not r.get("differs") and r["speedup_low"] <= 1 <= r["speedup_high"]:
        return f"{within_noise_text(r['variant'], r)[:-1]}; {format_seconds(r['step_time_s'])})"
    if paired:
        how = faster_or_slower(speedup, 2)
        how += "" if speedup >= 1 else f" (speed-up {times(speedup, 2)})"
        how += f", 95 % CI {r['speedup_low']:.2f}–{r['speedup_high']:.2f}"
    else:
        how = f"{faster_or_slower(speedup)}, measured apart"
    label = (
        ""
        if r["remedy"]
        else f", not a remedy: it computes {NOT_SAME_PROGRAM}"
        if r.get("differs")
        else ", an anti-pattern"
        if r["variant"] in ANTI_PATTERNS
        else f", not a remedy: its interval reaches below {times(1 + MARGIN)}"
        if paired
        else f", not a remedy: {APART}"
        if speedup > 1 + MARGIN
        else f", not a remedy (under {MARGIN:.0%} faster)"
    )
    return f"{r['variant']} {how} ({format_seconds(r['step_time_s'])}{label})"


def answer_lines(result: dict) -> list[str]:
    """The answer as printed, about 12 lines: a heading, one line per device, the
    verdict, why in a few words (the largest measured shares; the whole why stays in
    ``answer.json``), the remedies per device, the flip where two devices were measured,
    each prediction (a reference run's, one line per device card) and the sweep
    command."""
    sizes = ", ".join(f"{a}={v}" for a, v in result["sizes"].items())
    lines = ["", f"{result['case']} ({result['framework']}) at {sizes}:"]
    for device, d in result["devices"].items():
        if d["status"] != "ok":
            lines.append(
                f"  {device_label(device)}: {d['status']} {d.get('message') or ''}".rstrip()
            )
            continue
        interval = (
            f" (IQR {format_seconds(d['q1_s'])}–{format_seconds(d['q3_s'])}, {d['n_blocks']} blocks{', noisy' if d['noisy'] else ''})"
            if d["q1_s"] is not None
            else ""
        )
        lines.append(
            f"  {device_label(device)}: {format_seconds(d['step_time_s'])} per step{interval}; "
            f"cold start {format_seconds(d['cold_start_s'])}, first step {format_seconds(d['first_step_s'])}"
        )
    for device, why in result["absent"].items():
        lines.append(f"  {device_label(device)}: absent ({why})")
    v = result["verdict"]
    if v is None:
        lines.append(
            "verdict: one device measured here, so no measured comparison at this size"
            + ("; the device cards' predictions follow" if result.get("card_predictions") else "")
        )
    elif v["faster"] is None:
        ratio = f"{times(v['cpu_over_accelerator'])} CPU/{device_label(v['accelerator'])}"
        lines.append(f"verdict: indistinguishable within noise ({TIED_RULE}; medians {ratio})")
    else:
        acc = device_label(v["accelerator"])
        speedup = v["cpu_over_accelerator"]
        lines.append(f"verdict: {faster_device(speedup, acc, verb=' is')} at this size")
    # The long why (the model's terms, every variant's shares) stays in answer.json.
    why = result.get("why_short") or "no attribution of the step"
    lines.append(f"why: {why}; the whole why is in answer.json")
    for device, listed in result["remedies"].items():
        parts = [_remedy_text(r) for r in listed]
        lines.append(
            f"remedies on {device_label(device)} (against eager): "
            + ("; ".join(parts) or "none measured")
        )
    if v is not None:
        lines.append(f"flip: {result['flip']}")
    for text in result["predictions"].values():
        lines.append(text)
    if result.get("card_predictions"):
        lines.append(
            "predicted from device cards (not measured; crossover-study devices for their sources):"
        )
        lines.extend(f"  {text}" for text in result["card_predictions"].values())
    lines.append(f"full sweep for a crossover: {result['sweep_command']}")
    return lines
