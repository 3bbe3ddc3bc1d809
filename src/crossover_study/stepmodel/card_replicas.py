"""A data-parallel step on several devices of a card: each device runs one replica's share
of the counted work, the host dispatches as the strategy does, and the gradients'
all-reduce follows (:func:`price_replicas`). Split from
:mod:`crossover_study.stepmodel.card_model` by concern; one replica on one device is
that module's :func:`~crossover_study.stepmodel.card_model.price`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from crossover_study.stepmodel.card_model import NotPriced, Priced, Work, per_call_cost, price
from crossover_study.study.device_cards import Card

#: Variants that train one batch on several devices (data parallelism), and whether their
#: counts are one replica's: torch DDP runs a process per rank and counts the leader's
#: ops; MirroredStrategy runs every replica in one process and counts them all.
REPLICATED = {"ddp": True, "mirrored": False, "mirrored_fit": False}


def replica_share(work: Work, replicas: int) -> Work:
    """One replica's share of a replicated step whose counts are every replica's (each
    count and each product's or element-wise call's ``per_step`` over ``replicas``; the
    host's own work stays whole: one process runs it; each recurrent call's ``per_step``
    likewise)."""

    share = 1.0 / replicas
    counted = None if work.counted_kernels is None else work.counted_kernels * share
    return Work(
        framework=work.framework, variant=work.variant, program=work.program,
        ops=work.ops * share, graph_ops=work.graph_ops * share,
        function_calls=work.function_calls * share, kernels=work.kernels * share,
        flops=work.flops * share, mem_bytes=work.mem_bytes * share, syncs=work.syncs,
        host_s=work.host_s,
        products=tuple((f, n * share) for f, n in work.products),
        elementwise=tuple((b, n * share) for b, n in work.elementwise),
        host_reads=work.host_reads, precision=work.precision,
        host_reads_where=work.host_reads_where,
        host_data_where=work.host_data_where, input_s=work.input_s,
        rnn=tuple(replace(call, per_step=call.per_step * share) for call in work.rnn),
        counted_kernels=counted,
    )  # fmt: skip


def allreduce_s(card: Card, grad_bytes: float, replicas: int, end: str = "central") -> float:
    """One all-reduce of ``grad_bytes`` (bytes) between ``replicas`` devices of ``card``,
    seconds: a ring moves 2(N − 1)/N of the bytes over each device's link (Patarasuk and
    Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations", JPDC
    69(2), 2009; NCCL's ring), at the card's ``peer_link_bytes_per_s`` (its host link
    where it names none), plus the card's fixed ``allreduce_latency_s``. Raises
    :class:`NotPriced` where the card gives neither link rate nor latency."""
    entry = card.raw["datasheet"].get("peer_link_bytes_per_s") or card.raw["datasheet"].get(
        "host_link_bytes_per_s"
    )
    rate = entry.get("value") if isinstance(entry, Mapping) else None
    if not rate:
        raise NotPriced(f"the card {card.card} gives no link rate between two of its devices")
    moved = 2.0 * (replicas - 1) / replicas * grad_bytes
    return per_call_cost(card, "allreduce_latency_s", end) + moved / float(rate)


def price_replicas(
    work: Work, card: Card, replicas: int, grad_bytes: float, end: str = "central"
) -> Priced:
    """A data-parallel step (``work``: a replicated CPU row's counts, :data:`REPLICATED`
    says whose) on ``replicas`` devices of ``card``, one estimate: each device runs one
    replica's share (:func:`replica_share`) in parallel; the host dispatches one
    replica's ops where each rank is its own process (DDP), and every replica's from one
    process otherwise (MirroredStrategy: the low estimate takes its replica threads as
    dispatching in parallel, the others one after another); then the gradients'
    all-reduce (:func:`allreduce_s`), added to the step (the low estimate hides it
    behind the larger of host and device, as DDP's buckets overlap the backward pass).
    ``regime`` is ``communication-bound`` where the all-reduce sets the step. Raises
    :class:`NotPriced` for a variant that is not replicated, one replica, or a card that
    cannot price it."""
    if work.variant not in REPLICATED:
        raise NotPriced(f"{work.variant} is not a data-parallel variant")
    if replicas < 2:
        raise NotPriced("one replica is priced as one device")
    if card.device_class != "cuda":
        raise NotPriced("replicas are priced on NVIDIA GPUs (a TPU's cores are one host)")
    per_replica = REPLICATED[work.variant]
    replica = work if per_replica else replica_share(work, replicas)
    one = price(replica, card, "eager", end)
    host = one.host_s + one.host_launch_s
    if not per_replica and end != "low":
        whole = price(work, card, "eager", end)  # every replica's ops from one process
        host = whole.host_s + whole.host_launch_s
    reduce = allreduce_s(card, grad_bytes, replicas, end)
    body = max(host, one.device_s)
    step = max(body, reduce) if end == "low" else body + reduce
    regime = "communication-bound" if reduce > body else one.regime
    return Priced(
        step_s=step + one.sync_s,
        host_s=one.host_s,
        host_launch_s=host - one.host_s,
        device_s=one.device_s,
        floor_s=one.floor_s,
        compute_s=one.compute_s,
        memory_s=one.memory_s,
        sync_s=one.sync_s,
        kernels=one.kernels,
        regime=regime,
        host_basis=one.host_basis,
        allreduce_s=reduce,
    )
