"""Data-parallel PyTorch: the seed programs of s001-mlp and s004-lstm under
``DistributedDataParallel`` (variant ``ddp``), several ranks inside one measuring job.

The harness adapts block lengths from its own timings, so only one process may decide
what runs: rank 0 is the measuring process and drives, the other ranks are follower
processes that obey. Every command is a broadcast of a small int64 tensor
``[op, n]`` from rank 0 on a gloo control group:

- ``RUN n``: every rank runs ``n`` training steps (DDP all-reduces the gradients of
  every step, so the ranks stay in lockstep);
- ``SYNC``: every rank waits for its device, then a barrier (the harness's ``sync``);
- ``ALLREDUCE n``: ``n`` timed blocks of all-reduces of one flat tensor as large as the step's
  gradients (:meth:`RankProgram.time_allreduce`);
- ``STOP``: followers leave the process group and exit.

Followers are ``python -c`` subprocesses running
:func:`crossover_study.workloads.ddp_rank.follower_main` on
a free localhost port (not ``torch.multiprocessing.spawn``: spawn re-imports the
parent's ``__main__``, which in a Snakemake job is the job's generated script). They
exit by themselves when rank 0's process disappears, and :meth:`DDPWorkload.close`
always stops or kills and reaps them, also after a failed point.

Backends: gloo on ``cpu`` (the ranks share the job's cores: each is pinned to
``max(1, threads // replicas)`` intra-op threads), NCCL on ``cuda_multi`` (rank ``r``
on ``cuda:r``; commands still go through gloo). Strong scaling keeps the global batch at
the seed's batch and gives each rank ``batch / replicas`` rows; weak scaling gives each
rank the seed's batch (global batch ``batch x replicas``).

A rank's program and the followers' body are :mod:`crossover_study.workloads.ddp_rank`;
this module is rank 0's :class:`DDPWorkload`, which starts the followers.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from crossover_study.study import seed_data as data
from crossover_study.workloads import replica_batches
from crossover_study.workloads.ddp_rank import (
    ALLREDUCE,
    ALLREDUCE_REPEATS,
    RUN,
    STOP,
    SYNC,
    RankProgram,
    init_group,
    rank_device,
    release_program,
)

__all__ = [
    "JOIN_TIMEOUT_S",
    "DDPWorkload",
    "free_port",
]

#: Seconds ``close`` waits for a follower to exit before killing it.
JOIN_TIMEOUT_S = 15
#: The package's source folder, put on the followers' PYTHONPATH.
SRC = str(Path(__file__).resolve().parents[2])
#: A follower's program (``python -c``; ``sys.argv[1]``: its JSON spec).
_FOLLOWER = (
    "import json, sys; from crossover_study.workloads.ddp_rank import follower_main; "
    "follower_main(json.loads(sys.argv[1]))"
)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DDPWorkload:
    """Rank 0 of a ``ddp`` point: the harness's workload (``setup``, ``run``, ``sync``,
    ``loss``), driving ``replicas - 1`` follower processes.

    ``case``/``sizes``: the case at its seed size; ``device``: ``cpu`` or
    ``cuda_multi``; ``scaling``: ``strong`` or ``weak``; ``threads``: the job's CPU
    threads, shared by the ranks. Raises NotApplicable (case without a DDP program, or
    strong scaling of a batch the replicas do not divide) before starting anything.
    Call :meth:`close` when done (the runner does, also after a failure).
    """

    steps_per_call = 1
    min_steps_per_block = 1
    keras_fit = False

    def __init__(
        self,
        case: str,
        device: str,
        sizes: dict[str, int],
        replicas: int,
        scaling: str,
        threads: int,
        seed: int = 1234,
    ):
        self.replica_batch, self.global_batch = replica_batches(
            "ddp", case, device, sizes["batch"], replicas, scaling
        )
        self.case, self.device, self.sizes = case, device, dict(sizes)
        self.replicas, self.scaling, self.seed = replicas, scaling, seed
        self.threads_per_replica = max(1, threads // replicas)
        self.backend = "nccl" if device == "cuda_multi" else "gloo"
        self.loss_read_every = (
            1000 if case == "s001-mlp" else data.lstm_steps_per_epoch(self.global_batch)
        )
        self.followers: list[subprocess.Popen] = []
        self._logs: list = []
        self._busy = False
        self._old_threads: int | None = None
        self.prog: RankProgram | None = None
        self.ctrl = None

    # -- the harness's interface -------------------------------------------------
    def setup(self) -> None:
        """Start the followers, join the process group, build rank 0's program."""
        port = free_port()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]).rstrip(
                os.pathsep
            ),
            "OMP_NUM_THREADS": str(self.threads_per_replica),
            "MKL_NUM_THREADS": str(self.threads_per_replica),
        }
        for rank in range(1, self.replicas):
            spec = {
                "case": self.case,
                "sizes": self.sizes,
                "replica_batch": self.replica_batch,
                "replicas": self.replicas,
                "rank": rank,
                "port": port,
                "backend": self.backend,
                "device": self.device,
                "threads": self.threads_per_replica,
                "parent": os.getpid(),
            }
            log = tempfile.TemporaryFile(mode="w+")
            self._logs.append(log)
            self.followers.append(
                subprocess.Popen(
                    [sys.executable, "-c", _FOLLOWER, json.dumps(spec)],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            )
        self._old_threads = torch.get_num_threads()
        torch.set_num_threads(self.threads_per_replica)
        self._busy = True
        try:
            self.ctrl = init_group(self.backend, port, 0, self.replicas)
            device = rank_device(self.device, 0)
            if device.type == "cuda":
                torch.cuda.set_device(device)
            self.prog = RankProgram(
                self.case, self.sizes, self.replica_batch, self.replicas, 0, device, self.seed
            )
        except Exception as exc:
            raise RuntimeError(f"ddp set-up failed: {exc}{self._follower_output()}") from exc
        self._busy = False

    def _command(self, op: int, n: int = 0) -> None:
        self._busy = True
        dist.broadcast(torch.tensor([op, n], dtype=torch.int64), 0, group=self.ctrl)

    def run(self, n_steps: int) -> None:
        self._command(RUN, n_steps)
        self.prog.run(n_steps)
        self._busy = False

    def sync(self) -> None:
        self._command(SYNC)
        self.prog.sync()
        dist.barrier(group=self.ctrl)
        self._busy = False

    def loss(self) -> float:
        return self.prog.loss()

    # -- replica columns -----------------------------------------------------------
    def allreduce_s(self, repeats: int = ALLREDUCE_REPEATS) -> float:
        """Median seconds of one all-reduce of the step's gradients, measured alone
        (all ranks, same process group), see :meth:`RankProgram.time_allreduce`."""
        self._command(ALLREDUCE, repeats)
        seconds = self.prog.time_allreduce(self.ctrl, repeats)
        self._busy = False
        return seconds

    def replica_info(self) -> dict:
        """The row's replica columns (``allreduce_s`` measured now)."""
        if self.device == "cuda_multi":
            where = ", ".join(f"cuda:{r}" for r in range(self.replicas))
        else:
            where = ", ".join(f"cpu rank {r}" for r in range(self.replicas))
        return {
            "replicas": self.replicas,
            "scaling": self.scaling,
            "global_batch": self.global_batch,
            "threads_per_replica": self.threads_per_replica,
            "replica_devices": f"{where} ({self._transport()}, torch DDP)",
            "allreduce_s": self.allreduce_s(),
            "grad_bytes": float(self.prog.grad_numel * 4),  # the flat fp32 gradient all-reduced
        }

    def _transport(self) -> str:
        """The backend and, for gloo, the interface its pairs use (e.g. ``gloo on lo``)."""
        if self.backend != "gloo":
            return self.backend
        return f"gloo on {os.environ.get('GLOO_SOCKET_IFNAME') or 'the host name'}"

    def follower_pids(self) -> list[int]:
        return [p.pid for p in self.followers]

    def _follower_output(self) -> str:
        out = []
        for rank, (proc, log) in enumerate(zip(self.followers, self._logs, strict=True), 1):
            code = proc.poll()
            log.seek(0)
            tail = log.read()[-800:].strip()
            if code not in (None, 0) or tail:
                out.append(f"\n[rank {rank} exit {code}] {tail}")
        return "".join(out)

    def close(self) -> None:
        """Stop the followers (STOP when the protocol is idle, else kill), reap them,
        free rank 0's model, leave the process group and restore rank 0's threads. Safe
        to call twice."""
        try:
            alive = all(p.poll() is None for p in self.followers)
            if self.ctrl is not None and not self._busy and alive and self.followers:
                self._command(STOP)
                self._busy = False
        except Exception:  # noqa: BLE001 - the followers are killed below
            pass
        for proc in self.followers:
            try:
                proc.wait(timeout=JOIN_TIMEOUT_S if not self._busy else 0.5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in self._logs:
            log.close()
        self.followers, self._logs = [], []
        release_program(self.prog)  # before the group goes: see release_program
        self.prog = None
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - peers may be gone already
                pass
        self.ctrl = None
        if self._old_threads is not None:
            torch.set_num_threads(self._old_threads)
            self._old_threads = None
