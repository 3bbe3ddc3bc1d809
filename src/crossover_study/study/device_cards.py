"""Device cards: the public numbers of an accelerator the study prices a CPU-counted step
on, where that accelerator is not on this machine.

A card is ``config/devices/<card>.yaml``: the device's datasheet numbers (peak FLOP/s
per precision, memory, bandwidth, host link), the per-call costs a small step pays there
(a kernel launch, an eager op's dispatch, a synchronisation, a CUDA-graph replay, a
TPU step launch, the cold start), each a **range** with its sources, the fractions of
peak a step's products and element-wise ops reach, what the card does not know, and
the sources by id. The per-call costs that belong to a software stack rather than to
one chip (PyTorch's dispatch, TensorFlow's executor) live once per family,
``config/devices/families/<family>.yaml``; a card's own ``per_call`` entries replace
its family's. The merged card is validated against
``workflow/schemas/device_card.schema.yaml`` and by the checks a schema cannot say
(:func:`check_card`: low ≤ high, a fraction at most 1, every source id defined).

A card value comes from its source, never from a fit to a measurement of this project:
where a prediction misses, the miss is reported (``docs/VALIDATION.md``).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from crossover_study.core.origin import SCHEMAS
from crossover_study.core.paths import REPO_ROOT

#: Where the cards live, and their families' per-call costs.
CARDS_DIR = REPO_ROOT / "config" / "devices"
FAMILIES_DIR = CARDS_DIR / "families"
CARD_SCHEMA = SCHEMAS / "device_card.schema.yaml"
#: The keys a family file may hold (its per-call costs are merged under a card's).
FAMILY_KEYS = ("family", "description", "per_call", "achievable", "unknowns", "sources")
#: The cards a study predicts when its file says nothing (``predict`` in the schema).
DEFAULT_CARDS = ("t4", "a100-80gb", "h100-sxm")


class CardError(ValueError):
    """A card that breaks its schema, its family or a check the schema cannot say, or a
    card name that does not exist; the message names the file and key."""


@dataclass(frozen=True)
class Range:
    """A per-call cost (seconds) or an achievable fraction (dimensionless): the low and
    high ends its sources report, and their ids. ``central`` is the geometric mean of
    the ends, the middle of a range that spans a factor (a cost of 2–8 µs: 4 µs)."""

    low: float
    high: float
    sources: tuple[str, ...]
    #: ``((source, value), ...)`` where the range is the spread of several sources' values
    #: (the card's ``values``); empty where it gives only its ends.
    values: tuple[tuple[str, float], ...] = ()

    @property
    def central(self) -> float:
        return float((self.low * self.high) ** 0.5)

    def without(self, source: str) -> Range:
        """The range its other sources give, ``source``'s values left out (the
        leave-one-source-out check of a band): unchanged where the range lists no values
        or ``source`` gives none of them, or where no value of another source is left
        (one source cannot be checked against nothing)."""
        rest = tuple((s, v) for s, v in self.values if s != source)
        if not rest or len(rest) == len(self.values):
            return self
        numbers = [v for _, v in rest]
        kept = tuple(s for s in self.sources if s != source)
        return Range(min(numbers), max(numbers), kept, rest)

    def pick(self, end: str) -> float:
        """``low``, ``central`` or ``high``. Raises ValueError for another end."""
        if end not in ("low", "central", "high"):
            raise ValueError(f"end must be low, central or high, got {end!r}")
        return self.central if end == "central" else getattr(self, end)


@dataclass(frozen=True)
class Card:
    """One merged device card (see the module docstring); ``raw`` the merged mapping
    as validated, for the listing and the manifest."""

    card: str
    name: str
    device_class: str
    family: str
    raw: Mapping[str, Any]
    path: Path

    def peak(self, key: str) -> float | None:
        """A datasheet number (``fp32_flop_per_s``, ``memory_bandwidth_bytes_per_s``,
        ...) in its unit, or None where the device has no such mode."""
        value = self.raw["datasheet"][key]["value"]
        return None if value is None else float(value)

    def cost(self, key: str) -> Range | None:
        """A per-call cost of :data:`per_call` (seconds), or None where neither the card
        nor its family gives it."""
        entry = self.raw["per_call"].get(key)
        return None if entry is None else _range(entry)

    def fraction(self, key: str) -> Range:
        """``compute_fraction`` or ``memory_fraction`` (dimensionless)."""
        return _range(self.raw["achievable"][key])

    def source_ids(self) -> set[str]:
        """Every source id the card's numbers name."""
        return set(_named_sources(self.raw))

    def spread_sources(self) -> list[str]:
        """The sources that give a value of a range spread over several sources (the
        ``values`` of its per-call costs and fractions), in the card's order."""
        found = []
        for section in ("per_call", "achievable"):
            for entry in (self.raw.get(section) or {}).values():
                found.extend(v["source"] for v in entry.get("values") or ())
        return list(dict.fromkeys(found))

    def without_source(self, source: str) -> Card:
        """The card as its other sources make it: every range spread over several
        sources' values (``values``) taken without ``source``'s (:meth:`Range.without`);
        the rest unchanged. For the leave-one-source-out check of the bands; the result is
        not validated again and never written."""
        raw = copy.deepcopy(dict(self.raw))
        for section in ("per_call", "achievable"):
            for entry in (raw.get(section) or {}).values():
                whole = _range(entry)
                narrowed = whole.without(source)
                if narrowed is not whole:  # Range.without returns itself when unchanged
                    entry.update(
                        low=narrowed.low,
                        high=narrowed.high,
                        sources=list(narrowed.sources),
                        values=[v for v in entry["values"] if v["source"] != source],
                    )
        return Card(self.card, self.name, self.device_class, self.family, raw, self.path)


def _range(entry: Mapping[str, Any]) -> Range:
    values = tuple((str(v["source"]), float(v["value"])) for v in entry.get("values") or ())
    return Range(float(entry["low"]), float(entry["high"]), tuple(entry["sources"]), values)


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(yaml.safe_load(CARD_SCHEMA.read_text()))


def _read(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise CardError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    except yaml.YAMLError as exc:
        raise CardError(f"{path}: not YAML ({exc})") from exc
    if not isinstance(data, dict):
        raise CardError(f"{path}: a card is a mapping of keys, got {type(data).__name__}")
    return data


def _named_sources(raw: Mapping[str, Any]) -> Iterable[str]:
    """Every source id named under ``datasheet``, ``per_call`` and ``achievable``."""
    for section in ("datasheet", "per_call", "achievable"):
        for entry in (raw.get(section) or {}).values():
            if isinstance(entry, Mapping):
                yield from entry.get("sources", ())


def merge_family(card: Mapping[str, Any], family: Mapping[str, Any]) -> dict:
    """``card`` over its ``family`` (both as read from YAML): the family's ``per_call``
    entries with the card's replacing them key by key, the card's ``achievable`` else
    the family's, the family's ``unknowns`` then the card's, and the sources of both.
    Raises :class:`CardError` for a family key outside :data:`FAMILY_KEYS` or a source
    id that both define differently."""
    extra = set(family) - set(FAMILY_KEYS)
    if extra:
        raise CardError(f"family {family.get('family')!r}: unknown key(s) {sorted(extra)}")
    merged = copy.deepcopy(dict(card))
    merged["per_call"] = {**(family.get("per_call") or {}), **(card.get("per_call") or {})}
    merged.setdefault("achievable", copy.deepcopy(family.get("achievable")))
    merged["unknowns"] = [*(family.get("unknowns") or []), *(card.get("unknowns") or [])]
    sources = dict(family.get("sources") or {})
    for key, value in (card.get("sources") or {}).items():
        if key in sources and sources[key] != value:
            raise CardError(f"source {key!r} is defined differently by the card and its family")
        sources[key] = value
    merged["sources"] = sources
    return merged


def check_card(raw: Mapping[str, Any], where: str) -> None:
    """The checks the schema cannot say, on a merged card: every range's low ≤ high, a
    fraction at most 1, every source id named by a number defined under ``sources``.
    Raises :class:`CardError` naming ``where`` and the key."""
    for section in ("per_call", "achievable"):
        for key, entry in (raw.get(section) or {}).items():
            if entry["low"] > entry["high"]:
                raise CardError(
                    f"{where}: {section}.{key}: low {entry['low']} is above high {entry['high']}"
                )
            if section == "achievable" and entry["high"] > 1:
                raise CardError(f"{where}: achievable.{key}: a fraction of peak is at most 1")
            values = entry.get("values") or []
            if values:
                numbers = [v["value"] for v in values]
                if (min(numbers), max(numbers)) != (entry["low"], entry["high"]):
                    raise CardError(
                        f"{where}: {section}.{key}: low and high are {entry['low']} and "
                        f"{entry['high']}, its values span {min(numbers)}-{max(numbers)}"
                    )
                unnamed = sorted({v["source"] for v in values} - set(entry["sources"]))
                if unnamed:
                    raise CardError(
                        f"{where}: {section}.{key}: values name {unnamed}, not among its sources"
                    )
    missing = sorted(set(_named_sources(raw)) - set(raw.get("sources") or {}))
    if missing:
        raise CardError(f"{where}: source id(s) {missing} named but not defined under sources")


def _schema_error(error: jsonschema.ValidationError, where: str) -> CardError:
    path = ".".join(str(p) for p in error.absolute_path) or "<top level>"
    return CardError(f"{where}: {path}: {error.message}")


def load_card_file(path: str | Path, families_dir: str | Path | None = None) -> Card:
    """The card in ``path``, merged over its family (:func:`merge_family`, the family
    file ``<families_dir>/<family>.yaml``, default :data:`FAMILIES_DIR`), validated
    (schema, :func:`check_card`). Raises :class:`CardError` naming the file and key;
    a card whose ``card`` is not its file's stem is refused."""
    path = Path(path)
    raw = _read(path)
    family_name = raw.get("family")
    if not isinstance(family_name, str):
        raise CardError(f"{path}: family: a card names its family (cuda or tpu)")
    family_path = Path(families_dir or FAMILIES_DIR) / f"{family_name}.yaml"
    if not family_path.is_file():
        raise CardError(f"{path}: family: no family file {family_path.name}")
    merged = merge_family(raw, _read(family_path))
    error = jsonschema.exceptions.best_match(_validator().iter_errors(merged))
    if error is not None:
        raise _schema_error(error, str(path))
    check_card(merged, str(path))
    if merged["card"] != path.stem:
        raise CardError(f"{path}: card: {merged['card']!r} is not the file's name {path.stem!r}")
    return Card(
        card=merged["card"],
        name=merged["name"],
        device_class=merged["device_class"],
        family=merged["family"],
        raw=merged,
        path=path,
    )


def card_files(cards_dir: str | Path | None = None) -> list[Path]:
    """The card files of ``cards_dir`` (default :data:`CARDS_DIR`), sorted by name."""
    return sorted(Path(cards_dir or CARDS_DIR).glob("*.yaml"))


def all_cards(cards_dir: str | Path | None = None) -> dict[str, Card]:
    """Every card of ``cards_dir`` by name, each validated (raises :class:`CardError`
    for the first that is not)."""
    cards_dir = Path(cards_dir or CARDS_DIR)
    return {
        c.card: c
        for c in (load_card_file(p, cards_dir / "families") for p in card_files(cards_dir))
    }


def load_cards(names: Iterable[str], cards_dir: str | Path | None = None) -> list[Card]:
    """The cards ``names`` (in that order, each once). Raises :class:`CardError` naming
    an unknown card and the cards there are."""
    cards_dir = Path(cards_dir or CARDS_DIR)
    known = {p.stem: p for p in card_files(cards_dir)}
    out = []
    for name in dict.fromkeys(names):
        if name not in known:
            raise CardError(
                f"no device card {name!r} (cards: {', '.join(sorted(known)) or 'none'}; "
                "crossover-study devices lists them)"
            )
        out.append(load_card_file(known[name], cards_dir / "families"))
    return out


def card_inputs(names: Iterable[str], cards_dir: str | Path | None = None) -> list[Path]:
    """The files a prediction with cards ``names`` reads: each card's and its family's
    (for the workflow's inputs and the manifest's hashes)."""
    cards = load_cards(names, cards_dir)
    families = {c.path.parent / "families" / f"{c.family}.yaml" for c in cards}
    return [*(c.path for c in cards), *sorted(families)]
