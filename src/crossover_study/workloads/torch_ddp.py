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

Followers are ``python -m crossover_study.workloads.torch_ddp <json>`` subprocesses on
a free localhost port (not ``torch.multiprocessing.spawn``: spawn re-imports the
parent's ``__main__``, which in a Snakemake job is the job's generated script). They
exit by themselves when rank 0's process disappears, and :meth:`DDPWorkload.close`
always stops or kills and reaps them, also after a failed point.

Backends: gloo on ``cpu`` (the ranks share the job's cores: each is pinned to
``max(1, threads // replicas)`` intra-op threads), NCCL on ``cuda_multi`` (rank ``r``
on ``cuda:r``; commands still go through gloo). Strong scaling keeps the global batch at
the seed's batch and gives each rank ``batch / replicas`` rows; weak scaling gives each
rank the seed's batch (global batch ``batch x replicas``).
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from .. import cases
from ..precision import pin_fp32
from . import NotApplicable, data, replica_batches
from .torch_cases import KERAS_ADAM_EPS, LSTMRegressor, _glorot

#: Control ops broadcast by rank 0.
STOP, RUN, SYNC, ALLREDUCE = 0, 1, 2, 3
#: Timed blocks of all-reduces per point (the median is the row's ``allreduce_s``)
#: and all-reduces per block.
ALLREDUCE_REPEATS = 5
ALLREDUCE_PER_BLOCK = 10
#: Seconds a rank waits for the others (process-group start and every collective).
TIMEOUT_S = 120
#: Seconds ``close`` waits for a follower to exit before killing it.
JOIN_TIMEOUT_S = 15
#: Cases with a DDP program (their seeds or answers ask about replicas).
SRC = str(Path(__file__).resolve().parents[2])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MLPNet(nn.Module):
    """s001's three weight matrices as parameters (DDP needs a module):
    x (n x d_in) -> w1 -> clamp -> w2 -> clamp -> w3 (8 x 8), weights from ``randn``."""

    def __init__(self, d_in: int, hidden: int, d_out: int = 8):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(d_in, hidden))
        self.w2 = nn.Parameter(torch.randn(hidden, d_out))
        self.w3 = nn.Parameter(torch.randn(d_out, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mm(self.w1).clamp(min=0).mm(self.w2).clamp(min=0).mm(self.w3)


class RankProgram:
    """One rank's model, data shard and training step; the same code on every rank.

    ``sizes`` are the case's seed sizes; ``replica_batch`` rows per step on this rank
    (the global batch is ``replica_batch x replicas``). Data are generated for the
    global batch with the same seed on every rank and sliced: rank ``r`` gets rows
    ``[r * replica_batch, (r + 1) * replica_batch)`` of each global batch, placed on
    ``device`` once. Raises NotApplicable for a case without a DDP program.

    s001-mlp: the seed's step (squared-error sum, SGD lr 1e-9 on w1 and w2 only). DDP
    averages gradients over ranks, so the loss is multiplied by ``replicas`` to keep the
    gradient of the global batch's sum; w3's gradient is all-reduced and then dropped
    every step (the seed lets it accumulate unused). s004-lstm: the seed's regressor,
    Adam (Keras epsilon), mean squared error; the global batches of one epoch
    (``data.lstm_steps_per_epoch`` of the global batch) are cycled in order (no per-epoch shuffle).
    """

    def __init__(
        self,
        case: str,
        sizes: dict[str, int],
        replica_batch: int,
        replicas: int,
        rank: int,
        device: torch.device,
        seed: int = 1234,
    ):
        if case not in cases.with_flag("replicas"):
            raise NotApplicable(f"no DDP program for {case}")
        self.case, self.device, self.replicas = case, device, replicas
        self.step_index = 0
        self._loss = None
        pb, gb = replica_batch, replica_batch * replicas
        rows = slice(rank * pb, (rank + 1) * pb)
        torch.manual_seed(seed)
        if case == "s001-mlp":
            x = torch.randn(gb, sizes["d_in"])
            t = torch.randn(gb, 8)
            torch.manual_seed(seed)
            net = MLPNet(sizes["d_in"], sizes["hidden"])
            self.batches = [(x[rows].to(device), t[rows].to(device))]
            self.loss_read_every = 1000
            self.opt = None
        else:
            epoch = data.lstm_steps_per_epoch(gb)
            x, y = data.sequences(gb * epoch, sizes["seq_len"], seed=seed)
            x, y = torch.as_tensor(x), torch.as_tensor(y)
            net = _glorot(LSTMRegressor(x.shape[2], sizes["units"], y.shape[1]))
            self.batches = [
                (
                    x[s * gb : (s + 1) * gb][rows].to(device),
                    y[s * gb : (s + 1) * gb][rows].to(device),
                )
                for s in range(epoch)
            ]
            self.loss_read_every = epoch
        net = net.to(device)
        ids = [device.index] if device.type == "cuda" else None
        self.model = DistributedDataParallel(net, device_ids=ids)
        self.model.train()
        if case == "s004-lstm":
            self.opt = torch.optim.Adam(self.model.parameters(), eps=KERAS_ADAM_EPS)
        self.grad_numel = sum(p.numel() for p in net.parameters() if p.requires_grad)

    def _step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.case == "s001-mlp":
            net = self.model.module
            loss = (self.model(x) - y).pow(2).sum()
            (loss * self.replicas).backward()
            with torch.no_grad():
                net.w1 -= 1e-9 * net.w1.grad
                net.w2 -= 1e-9 * net.w2.grad
            for p in net.parameters():
                p.grad = None
            return loss
        loss = nn.functional.mse_loss(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss

    def run(self, n_steps: int) -> None:
        """``n_steps`` training steps; the loss is read back every ``loss_read_every``."""
        for _ in range(n_steps):
            x, y = self.batches[self.step_index % len(self.batches)]
            loss = self._step(x, y)
            if self.step_index % self.loss_read_every == 0:
                self._loss = loss.item()  # as the seed: steps 0, every, 2 x every, ...
            self.step_index += 1

    def sync(self) -> None:
        """Wait until this rank's device has finished its queued work."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def time_allreduce(self, ctrl, repeats: int) -> float:
        """Seconds of one ``all_reduce`` (sum) of a flat fp32 tensor of ``grad_numel``
        elements on the DDP backend: the step's gradient traffic measured alone.

        Timed as the harness times steps: ``repeats`` blocks of
        :data:`ALLREDUCE_PER_BLOCK` back-to-back all-reduces, each block started after a
        barrier and ended by this device's sync; the median over blocks of block
        seconds / all-reduces (a barrier per all-reduce would add the ranks' release
        skew to every sample).
        """
        flat = torch.ones(self.grad_numel, device=self.device)
        dist.all_reduce(flat)  # warm-up: the backend's first call sets up buffers
        samples = []
        for _ in range(repeats):
            dist.barrier(group=ctrl)
            self.sync()
            t0 = time.perf_counter()
            for _ in range(ALLREDUCE_PER_BLOCK):
                dist.all_reduce(flat)
            self.sync()
            samples.append((time.perf_counter() - t0) / ALLREDUCE_PER_BLOCK)
        return statistics.median(samples)

    def loss(self) -> float:
        return float("nan") if self._loss is None else float(self._loss)


def loopback_interface() -> str | None:
    """The loopback interface's name (``lo`` on Linux, ``lo0`` on macOS), or None when
    ``socket.if_nameindex`` lists neither."""
    names = {name for _, name in socket.if_nameindex()}
    return next((name for name in ("lo", "lo0") if name in names), None)


def _gloo_on_loopback() -> None:
    """Make gloo bind its pairs to the loopback interface, where the rendezvous is.

    Without ``GLOO_SOCKET_IFNAME``, torch's ``ProcessGroupGloo::createDefaultDevice``
    picks the address that ``gethostname()`` resolves to (pytorch/pytorch#26166): a name
    lookup in every process group, whose answer depends on the host's ``/etc/hosts``
    and resolver. All ranks of a point run on this host, so the loopback carries them
    whatever the host is called, and no rendezvous waits on a name lookup or on an
    address the ranks cannot reach each other on. An explicit ``GLOO_SOCKET_IFNAME`` is
    left as the user set it.
    """
    if not os.environ.get("GLOO_SOCKET_IFNAME"):
        name = loopback_interface()
        if name is not None:
            os.environ["GLOO_SOCKET_IFNAME"] = name


def _init(backend: str, port: int, rank: int, world: int):
    """Join the process group (TCP rendezvous on 127.0.0.1:port, gloo pairs on the
    loopback, see :func:`_gloo_on_loopback`) and make the gloo control group (created
    by every rank in the same order). Returns the control group."""
    _gloo_on_loopback()
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=TIMEOUT_S),
    )
    return dist.new_group(backend="gloo") if backend != "gloo" else dist.group.WORLD


def _device(kind: str, rank: int) -> torch.device:
    return torch.device(f"cuda:{rank}") if kind == "cuda_multi" else torch.device("cpu")


def _release_program(prog: RankProgram | None) -> None:
    """Free a rank's DDP model (its ``Reducer``) while the process group is still
    registered, before ``destroy_process_group``.

    The Reducer holds a reference to the gloo process group, and its Python binding
    deallocates with the GIL held. When the Reducer is the last owner, its deallocation
    runs ``~ProcessGroupGloo``, which joins gloo's worker thread; a worker still freeing
    a finished all-reduce needs the GIL for that work's tensors, so both wait for ever
    (pytorch/pytorch#56297). Seen here in 1 of 17 runs of the DDP tests, and in a loop
    of their points after 11 rounds (py-spy: rank 0 in ``std::thread::join`` under
    ``Reducer::~Reducer``, the worker in ``gil_scoped_acquire`` under
    ``~AsyncAllreduceWork``); the project's CI hung in that test until its time ran out.
    Freed first, with the group's own registry keeping it alive, the Reducer destroys
    nothing; ``destroy_process_group`` then frees the group through its own binding,
    which releases the GIL (pytorch/pytorch#154976). ``gc.collect`` frees
    the reference cycles that autograd hooks make around the model.
    """
    if prog is not None:
        prog.model = prog.opt = prog.batches = None
    gc.collect()


def _watch_parent(parent: int) -> None:
    """Exit this follower when its parent (rank 0's process) is gone: no orphans even
    when the measuring job is killed with ``kill -9``."""

    def watch():
        while True:
            if os.getppid() != parent:
                os._exit(3)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()


def follower_main(spec: dict) -> None:
    """Body of a follower rank: join, build the same program, obey rank 0's commands
    until STOP. ``spec`` is what :meth:`DDPWorkload.setup` passes (JSON). Pins fp32 as
    rank 0's process did (:func:`crossover_study.precision.pin_fp32`)."""
    _watch_parent(spec["parent"])
    torch.set_num_threads(spec["threads"])
    pin_fp32("torch")
    rank = spec["rank"]
    ctrl = _init(spec["backend"], spec["port"], rank, spec["replicas"])
    device = _device(spec["device"], rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    prog = RankProgram(
        spec["case"], spec["sizes"], spec["replica_batch"], spec["replicas"], rank, device
    )
    cmd = torch.zeros(2, dtype=torch.int64)
    while True:
        dist.broadcast(cmd, 0, group=ctrl)
        op, n = (int(v) for v in cmd.tolist())
        if op == RUN:
            prog.run(n)
        elif op == SYNC:
            prog.sync()
            dist.barrier(group=ctrl)
        elif op == ALLREDUCE:
            prog.time_allreduce(ctrl, n)
        elif op == STOP:
            break
        else:
            raise RuntimeError(f"unknown command {op}")
    _release_program(prog)
    del prog
    dist.destroy_process_group()


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
                    [sys.executable, "-m", __name__, json.dumps(spec)],
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
            self.ctrl = _init(self.backend, port, 0, self.replicas)
            device = _device(self.device, 0)
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
        _release_program(self.prog)  # before the group goes: see _release_program
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


if __name__ == "__main__":
    follower_main(json.loads(sys.argv[1]))
