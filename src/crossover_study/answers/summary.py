"""The report's first screen: one row per case × framework that answers "is the
accelerator worth it here, and why" in a few words, and each case's short lead.

A row (:func:`summary_rows`) holds, at the seed's size: the CPU's eager step with its
interval (the blocks' quartiles), each accelerator measured (or, where none was,
predicted from a device card and labelled as predicted), the verdict, where the
accelerator overtakes the CPU, why in a few words (the largest measured share of the
CPU's step, and the accelerator's regime) and the best remedy with its measured ratio.
:func:`summary_html` renders the rows as an HTML table whose case cells link to the
case's section; :func:`case_lead` is a case's first paragraph (at most about 60 words).
Every text from a study file or a plug-in is escaped (:func:`html.escape`). Nothing here
is estimated: numbers are read from the tables and rounded for display.
"""

from __future__ import annotations

import html
import json

import numpy as np
import pandas as pd

from crossover_study.analysis.card_prediction import at_seed as predicted_at_seed
from crossover_study.analysis.card_prediction import is_naive, is_other_variant
from crossover_study.answers.own_devices import replicated_pair, replicated_words
from crossover_study.answers.page_faults import page_fault_short
from crossover_study.answers.phrasebook import (
    EN_DASH,
    MARGIN,
    TIED,
    card_label,
    device_label,
    faster_device,
    fit_entry,
    fmt_size,
    times,
)
from crossover_study.answers.predicted import card_direction
from crossover_study.answers.remedies import remedy_table
from crossover_study.answers.rows import first_number, seed_rows, seed_verdict, to_number
from crossover_study.core.progress import format_seconds
from crossover_study.study import cases as case_registry
from crossover_study.study.spec import ACCELERATORS, FRAMEWORKS, contended_apart, synced, truthy

#: The attribution's categories in a few words (the CPU's largest measured share).
SHARE_WORDS = {
    "ops": "framework ops",
    "python": "Python",
    "data": "data loading",
    "trace": "tracing",
    "fit": "Keras fit's own work",
    "wait": "waiting on the device",
    "unattributed": "unattributed time",
}
#: The columns of the first screen's table, in order, with their headers.
COLUMNS = {
    "case": "Case",
    "cpu": "CPU step at the seed's size",
    "accelerator": "Accelerator",
    "verdict": "Verdict at the seed's size",
    "overtakes": "Accelerator overtakes at",
    "why": "Why",
    "remedy": "Best remedy",
}
#: The first screen's table's look: small type and tight cells, so that the four seeds'
#: rows fit a 1366 × 768 screen with the title above them (tests/test_browser.py).
SUMMARY_STYLE = """<style>
table.summary { border-collapse: collapse; font-size: 12px; line-height: 1.25; width: 100%;
  table-layout: auto; }
table.summary th, table.summary td { border: 1px solid #ccc; padding: 2px 5px;
  text-align: left !important; vertical-align: top; }
table.summary th { background: #f3f3f3; }
table.summary tr:nth-child(even) td { background: #fafafa; }
</style>"""
#: Variants of the naive program (the answer's subject) on each device.
NAIVE = ("eager", "strategy_step")


def block_quartiles(row: pd.Series) -> tuple[float, float] | None:
    """First and third quartile (s per step) of a row's timed blocks
    (``block_step_times_s``), or None without blocks."""
    try:
        blocks = json.loads(row["block_step_times_s"])
    except (TypeError, ValueError, KeyError):
        return None
    return (float(np.percentile(blocks, 25)), float(np.percentile(blocks, 75))) if blocks else None


def _step_text(row: pd.Series) -> str:
    """'581 µs (549–755 µs)': the median step and its blocks' quartiles."""
    text = format_seconds(row["step_time_s"])
    q = block_quartiles(row)
    if q is not None:
        text += f" ({format_seconds(q[0])}{EN_DASH}{format_seconds(q[1])})"
    flags = [
        f
        for f, c in (("noisy", "noisy"), ("contended", "contended"))
        if c in row and truthy(pd.Series([row[c]])).iloc[0]
    ]
    return text + (f", {' and '.join(flags)}" if flags else "")


def measured_shares(row: pd.Series, top: int = 1) -> str:
    """'framework ops 74%, Python 26%': the ``top`` largest measured shares of a row's
    profiled step (its ``attr_*_s`` over their sum); empty without an attribution.
    Keras's own work is named by the entry point it was spent in
    (:func:`phrasebook.fit_entry`: 'Keras predict's own work 96%')."""
    shares = {k: to_number(row.get(f"attr_{k}_s")) for k in SHARE_WORDS}
    shares = {k: v for k, v in shares.items() if v}
    whole = sum(shares.values())
    if not whole:
        return ""
    ranked = sorted(shares, key=shares.get, reverse=True)[:top]
    words = {**SHARE_WORDS, "fit": f"Keras {fit_entry(row)}'s own work"}
    return ", ".join(f"{words[k]} {shares[k] / whole:.0%}" for k in ranked)


def _why_cpu(row: pd.Series) -> str:
    """'CPU: framework ops 74%': the largest measured share of the CPU's step."""
    share, faults = measured_shares(row), page_fault_short(row)  # faults: issue 51
    return f"CPU: {share}" + (f", {faults}" if faults else "") if share else ""


def _best_cpu_remedy(rows: pd.DataFrame) -> str:
    """The fastest same-program variant on the CPU offered as a remedy ('CPU: compile
    1.4× (1.35–1.46)', with the 95 % interval of its paired speed-up where it was
    interleaved with eager), or that none beats eager by more than :data:`MARGIN` (the
    remedy sentence's rule, :func:`remedies.remedy_table`; contended rows left out), or
    that none is offered where the fastest was measured apart from eager, with no
    paired interval (:data:`remedies.APART`)."""
    rows = synced(contended_apart(rows))
    table = remedy_table(rows[(rows["device"] == "cpu") & (rows["status"] == "ok")])
    if table.empty:
        return ""
    offered = table[table["offered"]]
    if offered.empty:
        top = table.iloc[0]
        if not top["interleaved"] and top["speedup"] > 1 + MARGIN:  # remedies.APART
            return f"CPU: none offered ({top.name} {times(top['speedup'])} unpaired)"
        return f"CPU: none beats eager by {MARGIN:.0%}"
    best = offered.iloc[0]
    interval = (
        f" ({best['speedup_low']:.2f}–{best['speedup_high']:.2f})" if best["interleaved"] else ""
    )
    return f"CPU: {best.name} {times(best['speedup'])}{interval}"


def _measured_accelerator(timings, crossover, case, framework) -> dict | None:
    """The first accelerator with ok naive rows of ``case`` × ``framework`` at the seed's
    size: its step text, the verdict, where it overtakes and its regime; None."""
    rows = seed_rows(timings, case)
    for acc in ACCELERATORS:
        mine = synced(rows[(rows["device"] == acc) & (rows["framework"] == framework)])
        mine = mine[mine["variant"].isin(NAIVE)]
        if mine.empty:
            continue
        row = mine.iloc[0]
        name = device_label(acc)
        device = row.get("device_name") if isinstance(row.get("device_name"), str) else name
        cross = (
            crossover[
                (crossover["case"] == case)
                & (crossover["framework"] == framework)
                & (crossover["variant"] == row["variant"])
                & (crossover["accelerator"] == acc)
            ]
            if not crossover.empty
            else crossover
        )
        speedup = first_number(cross["speedup_at_seed"]) if len(cross) else None
        # The CPU row the crossover compared it with (its cpu_variant), for the verdict.
        paired = cross["cpu_variant"].dropna() if "cpu_variant" in cross else ()
        cpu = synced(rows[(rows["device"] == "cpu") & (rows["framework"] == framework)])
        cpu = cpu[cpu["variant"] == (paired.iloc[0] if len(paired) else row["variant"])]
        verdict = seed_verdict(cross, cpu.iloc[0] if len(cpu) else None, row)
        if speedup is None:
            text = "no verdict"
        elif verdict == TIED:
            text = f"tied within noise ({times(speedup)})"
        else:
            text = faster_device(speedup, name)
        overtakes = (
            [
                f"{r['axis']} ≈ {fmt_size(r['crossover_size'])}"
                for _, r in cross[cross["outcome"] == "crossover"].iterrows()
                if to_number(r.get("crossover_size")) is not None
            ]
            if len(cross)
            else []
        )
        throughout = len(cross) and (cross["outcome"] == "accelerator_faster_throughout").any()
        return {
            "accelerator": f"{device}: {_step_text(row)} (measured)",
            "verdict": text,
            "overtakes": "; ".join(overtakes)
            or ("faster throughout" if throughout else "not in the measured range"),
            "regime": row.get("attr_device_regime")
            if isinstance(row.get("attr_device_regime"), str)
            else "",
        }
    return None


def _own_cards(case: str) -> list[str]:
    """The cards of ``case``'s own accelerators at its seed's size on one device (the
    seed's :class:`~crossover_study.study.cases.OwnDevice`), in the seed's order; empty
    for a case without them."""
    try:
        found = case_registry.get(case).own_devices
    except KeyError:
        return []
    return [d.card for d in found if not d.sizes and d.replicas == 1]


def _predicted_replicas(predicted, case: str, framework: str) -> dict | None:
    """A seed whose own accelerators are several GPUs (s004: two under
    MirroredStrategy): the first screen's accelerator and verdict are the cards' data-parallel
    prediction on that many GPUs against one of them (``predicted.replicated_pair``);
    None for another case or without both rows."""
    try:
        owns = [d for d in case_registry.get(case).own_devices if d.replicas > 1]
    except KeyError:
        return None
    for own in owns:
        pair = (
            replicated_pair(predicted, case, own.card, own.replicas, framework)
            if predicted is not None and not predicted.empty
            else None
        )
        if pair is None:
            continue
        m, o = pair["many"], pair["one"]
        short = card_label(m["device_name"])
        return {
            "accelerator": (
                f"{own.replicas} × {short} ({pair['variant']}) ≈ "
                f"{format_seconds(m['predicted_step_s'])} · 1 × {short} ≈ "
                f"{format_seconds(o['predicted_step_s'])} (predicted)"
            ),
            "verdict": f"{own.replicas} GPUs {replicated_words(pair)} (predicted)",
            "overtakes": "",
            "regime": f"{own.replicas} × {short}: {m['regime']} (predicted)",
            "remedy": "",
        }
    return None


def _predicted_verdict(row: pd.Series, short: str) -> str:
    """The first screen's verdict of one prediction: a direction only where the band
    lies on one side of the CPU's measured spread (``predicted.card_direction``), else
    'too close to call'."""
    way = card_direction(row)
    speedup = row["cpu_step_time_s"] / row["predicted_step_s"]
    # Where the card runs another program than the CPU's eager one (a TPU's
    # strategy_step), the CPU it is set against ran that program too: say so.
    program = row.get("cpu_variant")
    both = f", both running {program}" if isinstance(program, str) and program != "eager" else ""
    if way == "faster":
        return f"{faster_device(speedup, short)} (predicted{both})"
    if way == "slower":
        return f"{faster_device(speedup, short, than=f' than {short}')} (predicted{both})"
    return (
        f"too close to call without measuring: {short} "
        f"{format_seconds(row['predicted_low_s'])}{EN_DASH}"
        f"{format_seconds(row['predicted_high_s'])} against the CPU's "
        f"{format_seconds(row['cpu_step_time_s'])} (predicted{both})"
    )


def _predicted_accelerator(predicted, crossovers, case, framework, cpu_s) -> dict | None:
    """The device cards' predictions of ``case`` × ``framework``'s naive program at the
    seed's size: each card's step (the seed's own accelerators only, where the study
    predicted them), the verdict and crossover of the first of them, its regime and its
    fastest variant; None without a priced prediction."""
    if predicted is None or predicted.empty:
        return None
    rows = predicted_at_seed(predicted[predicted["framework"] == framework], case)
    rows = rows[rows["predicted_step_s"].notna()]
    naive = rows[is_naive(rows)]
    if naive.empty:
        return None
    own = _own_cards(case)
    mine = naive[naive["card"].isin(own)]
    if not mine.empty:
        naive = mine.assign(_order=mine["card"].map(own.index)).sort_values("_order")
    names = [card_label(n) for n in naive["device_name"]]
    times = naive["predicted_step_s"].astype(float)
    if times.max() <= 1.05 * times.min():  # the cards agree: one number, every name
        steps = [f"≈ {format_seconds(times.iloc[0])} on {', '.join(names)}"]
    else:
        steps = [f"{n} ≈ {format_seconds(t)}" for n, t in zip(names, times, strict=True)]
    first = naive.iloc[0]
    short = card_label(first["device_name"])
    verdict = _predicted_verdict(first, short) if cpu_s else ""
    overtakes = "not in the measured range (predicted)"
    if crossovers is not None and not crossovers.empty:
        mine = crossovers[
            (crossovers["card"] == first["card"])
            & (crossovers["case"] == case)
            & (crossovers["framework"] == framework)
            & (crossovers["variant"] == first["variant"])
        ]
        crossing = mine[mine["outcome"] == "crossover"]
        if not crossing.empty:
            r = crossing.iloc[0]
            overtakes = f"{r['axis']} ≈ {fmt_size(r['crossover_size'])} (predicted, {short})"
        elif (mine["outcome"] == "accelerator_faster_throughout").any():
            overtakes = "faster throughout (predicted)"
    others = rows[(rows["card"] == first["card"]) & is_other_variant(rows)]
    others = others.sort_values("predicted_step_s")
    remedy = ""
    if not others.empty and others.iloc[0]["predicted_step_s"] < first["predicted_step_s"]:
        best = others.iloc[0]
        remedy = (
            f"{short}: {best['variant']} ≈ {format_seconds(best['predicted_step_s'])} (predicted)"
        )
    return {
        "accelerator": " · ".join(steps) + " (predicted)",
        "verdict": verdict,
        "overtakes": overtakes,
        "regime": f"{short}: {first['regime']} (predicted)",
        "remedy": remedy,
    }


def summary_rows(
    timings: pd.DataFrame,
    crossover: pd.DataFrame,
    cases: list[str],
    predicted: pd.DataFrame | None = None,
    crossovers: pd.DataFrame | None = None,
) -> list[dict]:
    """One dict per case of ``cases`` × framework with an ok CPU eager (or
    strategy_step) row at the seed's size: ``case``, ``framework`` and the texts of
    :data:`COLUMNS` (module docstring). A measured accelerator takes the place of the
    predictions; where neither is, the accelerator cell says so."""
    out = []
    for case in cases:
        at_seed = synced(seed_rows(timings, case))
        for framework in [f for f in FRAMEWORKS if f in set(at_seed["framework"])]:
            cpu = at_seed[
                (at_seed["device"] == "cpu")
                & (at_seed["framework"] == framework)
                & at_seed["variant"].isin(NAIVE)
            ]
            if cpu.empty:
                continue
            row = cpu.iloc[0]
            side = (
                _measured_accelerator(timings, crossover, case, framework)
                or _predicted_replicas(predicted, case, framework)
                or _predicted_accelerator(
                    predicted, crossovers, case, framework, float(row["step_time_s"])
                )
                or {
                    "accelerator": "none measured or predicted",
                    "verdict": "only the CPU was measured",
                    "overtakes": "",
                    "regime": "",
                }
            )
            why = "; ".join(t for t in (_why_cpu(row), side.get("regime", "")) if t)
            mine = at_seed[at_seed["framework"] == framework]
            remedies = [t for t in (_best_cpu_remedy(mine), side.get("remedy", "")) if t]
            out.append(
                {
                    "case": case,
                    "framework": framework,
                    "cpu": _step_text(row),
                    "accelerator": side["accelerator"],
                    "verdict": side["verdict"],
                    "overtakes": side["overtakes"],
                    "why": why,
                    "remedy": "; ".join(remedies) or "no variant measured",
                }
            )
    return out


def anchor(case: str) -> str:
    """The HTML id of ``case``'s section (letters, digits and hyphens)."""
    return "case-" + "".join(c if c.isalnum() else "-" for c in case)


def summary_html(rows: list[dict]) -> str:
    """The first screen's table (``<table class="summary">``), one row per
    :func:`summary_rows` dict, its case cell a link to the case's section
    (:func:`anchor`); every cell escaped."""
    head = "".join(f"<th>{html.escape(title)}</th>" for title in COLUMNS.values())
    body = []
    for row in rows:
        cells = [
            f'<td><a href="#{anchor(row["case"])}">{html.escape(row["case"])}</a>'
            f"<br><small>{html.escape(row['framework'])}</small></td>"
        ]
        cells += [f"<td>{html.escape(str(row[key]))}</td>" for key in list(COLUMNS)[1:]]
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        '<table class="summary" id="summary"><thead><tr>'
        + head
        + "</tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table>"
    )


def case_lead(rows: list[dict], case: str) -> str:
    """``case``'s lead, one sentence per framework (about 60 words in all): 'With torch:
    CPU 1.7× faster than T4 (predicted); why: CPU: framework ops 74%; T4: launch-bound
    (predicted); best remedy: T4: cuda_graph ≈ 55 µs (predicted).' Empty for a case
    without summary rows. Plain text: the caller escapes it."""
    parts = []
    for row in (r for r in rows if r["case"] == case):
        text = f"With {row['framework']}: {row['verdict']}"
        if row["why"]:
            text += f"; why: {row['why']}"
        text += f"; best remedy: {row['remedy']}."
        parts.append(text)
    return " ".join(parts)
