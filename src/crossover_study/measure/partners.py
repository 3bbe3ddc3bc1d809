"""Within one measuring job, the step as written kept as the partner its variants are
interleaved with (:mod:`crossover_study.measure.pairing`): the order the job measures its
points in, and the eager workload kept for the variants of its size, or built again from
the journal's eager row when an earlier run measured it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from crossover_study.measure import frameworks
from crossover_study.measure import pairing as pairs
from crossover_study.measure.harness import Partner, time_block
from crossover_study.measure.journal import Journal
from crossover_study.measure.point import Pairing
from crossover_study.study.spec import PointSpec
from crossover_study.workloads import framework_mismatch


def paired_order(points: tuple[PointSpec, ...], again: list[bool]) -> list[int]:
    """Indices of ``points`` in the order they are measured: points whose process ended
    in them before last (``again``); otherwise the points of one size together, the step
    as written (eager) first, so that its built workload is the partner its variants are
    interleaved with (:mod:`crossover_study.measure.pairing`)."""
    first: dict[str, int] = {}
    for i, p in enumerate(points):
        first.setdefault(pairs.reference_point(p).key(), i)

    def order(i: int) -> tuple:
        p = points[i]
        return (again[i], first[pairs.reference_point(p).key()], p.variant != "eager", i)

    return sorted(range(len(points)), key=order)


def partners_wanted(points: tuple[PointSpec, ...], journal: Journal) -> set[str]:
    """Keys of the eager points whose built workload some variant of the job still to
    be measured is interleaved with."""
    return {
        pairs.reference_point(p).key()
        for p in points
        if p.variant != "eager"
        and pairs.not_interleaved_reason(p) is None
        and framework_mismatch(p) is None
        and journal.final_row(p.key()) is None
    }


@dataclass
class KeptPartner:
    """The eager workload a job keeps for the variants of one size: at most one at a
    time, closed before another size's points run (its tensors go first)."""

    journal: Journal
    #: The job's threads (a workload built again is built with them).
    threads: int
    #: Keys of the eager points whose workload some variant still to be measured is
    #: interleaved with.
    wanted: set = field(default_factory=set)
    #: The kept eager workload and its point's key (None: none kept).
    partner: Partner | None = None
    partner_key: str | None = None

    def release(self) -> None:
        """Close the kept eager workload, if any."""
        partner, self.partner, self.partner_key = self.partner, None, None
        close = getattr(partner.workload, "close", None) if partner else None
        if close is not None:
            close()

    def pairing_for(self, point: PointSpec) -> Pairing:
        """How ``point`` is paired with the step as written: an eager point whose
        variants follow keeps its workload; an interleavable variant gets the kept eager
        workload (built again from the journal's eager row when the job did not measure
        it: :func:`rebuild_partner`), or is measured alone with the reason."""
        reference = pairs.reference_point(point).key()
        if self.partner_key not in (None, reference):
            self.release()  # another size: its tensors go before this one's
        if point.variant == "eager":
            self.release()
            return Pairing(keep=point.key() in self.wanted)
        reason = pairs.not_interleaved_reason(point)
        if reason is not None:
            return Pairing(alone=reason)
        if self.partner is None:
            eager = self.journal.final_row(reference)
            if eager is None or eager.get("status") != "ok":
                return Pairing(
                    alone="the step as written (eager) has no ok measurement at this size "
                    "to be interleaved with"
                )
            try:
                self.partner = rebuild_partner(pairs.reference_point(point), eager, self.threads)
                self.partner_key = reference
            except Exception as exc:  # noqa: BLE001 - the variant is then measured alone
                return Pairing(alone=f"the step as written could not be built again ({exc})")
        return Pairing(partner=self.partner)

    def after_point(self, point: PointSpec, pairing: Pairing) -> None:
        """Keep an eager point's workload that :func:`measure_point` left open."""
        if pairing.kept is not None:
            self.partner, self.partner_key = pairing.kept, point.key()


def rebuild_partner(point: PointSpec, eager_row: dict, threads: int) -> Partner:
    """The eager workload of ``point`` built again with ``threads`` threads (its row was
    kept from the journal, so this job did not measure it), set up and warmed for one
    block of the length its row calibrated (``steps_per_block``), to be interleaved with
    its variants. Raises what building or running the workload raises."""
    workload = frameworks.make_workload(point, threads)
    workload.setup()
    workload.sync()
    k = int(eager_row["steps_per_block"])
    time_block(workload, k, time.perf_counter)
    return Partner(workload, k, pairs.order_seed(point.key()))
