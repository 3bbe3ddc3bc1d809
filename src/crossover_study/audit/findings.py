"""The audit's report model: one finding, the report of one audited target, and how
both are printed (:mod:`crossover_study.audit.verify`). Nothing here reads a file."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

#: Rows listed per finding before "... and N more".
MAX_ROWS = 8


def clipped(lines: list[str]) -> list[str]:
    """The first :data:`MAX_ROWS` of ``lines`` and, when there are more, a last line
    ``... and N more``."""
    more = len(lines) - MAX_ROWS
    return lines[:MAX_ROWS] + ([f"... and {more} more"] if more > 0 else [])


@dataclass
class Finding:
    """One result of an audit. ``level`` is ``FAIL`` or ``note``; ``expected`` and
    ``actual`` are sha256 hex digests where a hash was compared; ``details`` are lines
    printed under the finding."""

    level: str
    kind: str
    path: str
    message: str = ""
    expected: str | None = None
    actual: str | None = None
    details: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The finding as printed: a heading line, details, expected and actual hash."""
        head = f"  {self.level} {self.kind}: {self.path}"
        if self.message:
            head += f": {self.message}"
        lines = [head]
        lines += [f"       {d}" for d in self.details]
        if self.expected is not None or self.actual is not None:
            lines.append(f"       expected sha256 {self.expected or '-'}")
            lines.append(f"       actual   sha256 {self.actual or '-'}")
        return "\n".join(lines)


@dataclass
class AuditReport:
    """Findings of one audited target (a results folder or ``reports/paper``) and the
    number of files whose hash was recomputed."""

    target: Path
    title: str = ""
    findings: list[Finding] = field(default_factory=list)
    files_checked: int = 0

    @property
    def failures(self) -> list[Finding]:
        """Findings of level ``FAIL``."""
        return [f for f in self.findings if f.level == "FAIL"]

    @property
    def ok(self) -> bool:
        """True when nothing failed (notes do not count)."""
        return not self.failures

    def add(self, level: str, kind: str, path, message: str = "", **kw) -> None:
        """Record a finding about ``path`` (any object; kept as its ``str``); ``kw`` are
        :class:`Finding`'s ``expected``, ``actual`` and ``details``."""
        self.findings.append(Finding(level, kind, str(path), message, **kw))

    def text(self) -> str:
        """The report as printed by the command line: a heading, failures before notes,
        and a last line ``OK`` or ``FAILED`` with the counts."""
        lines = [f"audit {self.target}{f' ({self.title})' if self.title else ''}"]
        order = {"FAIL": 0, "note": 1}
        lines += [f.text() for f in sorted(self.findings, key=lambda f: order[f.level])]
        notes = len(self.findings) - len(self.failures)
        verdict = "OK" if self.ok else "FAILED"
        lines.append(
            f"  {verdict}: {self.files_checked} files hashed, {len(self.failures)} failure(s), "
            f"{notes} note(s)"
        )
        return "\n".join(lines)
