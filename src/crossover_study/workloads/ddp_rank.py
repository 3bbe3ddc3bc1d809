"""One rank of a ``ddp`` point: its model, data shard and training step
(:class:`RankProgram`), joining the process group, and a follower rank's body
(:func:`follower_main`), which obeys rank 0's broadcast commands.

Rank 0, the measuring process, is :class:`crossover_study.workloads.torch_ddp.DDPWorkload`
(that module's docstring gives the protocol); it starts the followers as
``python -c`` processes that call :func:`follower_main` with their JSON spec. Import only inside a job that has already pinned its threads.
"""

from __future__ import annotations

import datetime
import gc
import os
import socket
import statistics
import threading
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from crossover_study.study import cases
from crossover_study.study import seed_data as data
from crossover_study.study.applicability import NotApplicable
from crossover_study.workloads.precision import pin_fp32
from crossover_study.workloads.torch_base import KERAS_ADAM_EPS, glorot
from crossover_study.workloads.torch_cases import LSTMRegressor

#: Control ops broadcast by rank 0.
STOP, RUN, SYNC, ALLREDUCE = 0, 1, 2, 3
#: Timed blocks of all-reduces per point (the median is the row's ``allreduce_s``)
#: and all-reduces per block.
ALLREDUCE_REPEATS = 5
ALLREDUCE_PER_BLOCK = 10
#: Seconds a rank waits for the others (process-group start and every collective).
TIMEOUT_S = 120


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
            net = glorot(LSTMRegressor(x.shape[2], sizes["units"], y.shape[1]))
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


def init_group(backend: str, port: int, rank: int, world: int):
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


def rank_device(kind: str, rank: int) -> torch.device:
    return torch.device(f"cuda:{rank}") if kind == "cuda_multi" else torch.device("cpu")


def release_program(prog: RankProgram | None) -> None:
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
    rank 0's process did (:func:`crossover_study.workloads.precision.pin_fp32`)."""
    _watch_parent(spec["parent"])
    torch.set_num_threads(spec["threads"])
    pin_fp32("torch")
    rank = spec["rank"]
    ctrl = init_group(spec["backend"], spec["port"], rank, spec["replicas"])
    device = rank_device(spec["device"], rank)
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
    release_program(prog)
    del prog
    dist.destroy_process_group()
