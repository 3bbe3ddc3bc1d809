"""The journal of a measuring job: one JSON line per point started or done, so that a
crash or ``kill -9`` loses at most the point in flight and a rerun measures only what is
missing (:func:`crossover_study.runner.run_group` writes and reads it).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

#: A point whose measurement killed the process this many times is recorded as an error
#: instead of being tried again forever.
MAX_ATTEMPTS = 2
#: Statuses that are final: a rerun does not measure these points again. ``unavailable``
#: is not final (the device may be there next time).
FINAL = ("ok", "oom", "error", "not_applicable")


class Journal:
    """Append-only JSON-lines record of a group's points; survives ``kill -9``.

    Each line is ``{"event": "start"|"done", "key": ..., "settings": ..., "row": {...}}``
    (a ``done`` of a point ended at its deadline also has ``"point_deadline_s"``, kept
    in ``ended_at``); a torn last line (the process died while writing it) is ignored.
    Only entries written under ``settings`` (:meth:`crossover_study.runner.GroupSpec.settings`) count: a row
    measured with other threads or another timing policy (or by a version that did not
    record its settings) is listed in ``stale`` and measured again.
    """

    def __init__(self, path: Path, settings: str | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.settings = settings
        self.done: dict[str, dict] = {}
        self.starts: dict[str, int] = {}
        self.stale: dict[str, dict] = {}
        self.ended_at: dict[str, float] = {}
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue
                key = entry.get("key")
                if entry.get("settings") != settings:
                    if entry.get("event") == "done":
                        self.stale[key] = entry["row"]
                    continue
                if entry.get("event") == "done":
                    self.done[key] = entry["row"]
                    self.ended_at.pop(key, None)
                    if entry.get("point_deadline_s") is not None:
                        self.ended_at[key] = entry["point_deadline_s"]
                elif entry.get("event") == "start":
                    self.starts[key] = self.starts.get(key, 0) + 1

    def _append(self, entry: dict) -> None:
        with self.path.open("a") as fh:
            fh.write(json.dumps(entry, default=json_default) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def start(self, key: str) -> None:
        """Journal that the point ``key`` is starting (counted in ``starts``: a point
        that ends :data:`MAX_ATTEMPTS` processes is not started again)."""
        self.starts[key] = self.starts.get(key, 0) + 1
        self._append({"event": "start", "key": key, "settings": self.settings})

    def done_entry(self, key: str, row: dict, point_deadline_s: float | None = None) -> dict:
        """The ``done`` line of ``row`` (with the deadline it was ended at, if any)."""
        entry = {"event": "done", "key": key, "settings": self.settings, "row": row}
        if point_deadline_s is not None:
            entry["point_deadline_s"] = point_deadline_s
        return entry

    def finish(self, key: str, row: dict, point_deadline_s: float | None = None) -> None:
        """Journal ``row`` as the point's result; ``point_deadline_s``: the deadline it
        was ended at (a rerun under a longer or no deadline measures it again)."""
        self.done[key] = row
        self.ended_at.pop(key, None)
        if point_deadline_s is not None:
            self.ended_at[key] = point_deadline_s
        self._append(self.done_entry(key, row, point_deadline_s))

    def final_row(self, key: str) -> dict | None:
        """The journaled row of ``key`` when its status is :data:`FINAL`, else None."""
        row = self.done.get(key)
        return row if row is not None and row.get("status") in FINAL else None


def json_default(value):
    """``json.dumps``'s ``default`` for a journal line: a float NaN is written as
    ``null``, anything else JSON cannot hold (a path, a numpy scalar) as its ``str``."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return str(value)
