"""The torch.distributed backend: one process per node, neighbour exchanges only.

Each process holds ONE node's arrays and runs exactly the simulator's schedule
(:func:`~icmlkit.lib.solve_decentralized.methods.apapc` on a one-row :class:`NodeOps`); the single
communication primitive ``mix`` becomes one ``dist.batch_isend_irecv`` with the node's
neighbours (send my block, receive theirs, sum with the Laplacian weights). No all_reduce or other
collective runs inside an iteration; with global logging on (needed for a ``--tol`` stopping test)
every iteration ends with an ``all_gather`` of the iterates used only by the monitor.

The setup constants (spectral bounds, scalings, step sizes) are computed once by the launcher and
given to the processes. Every process also receives the whole problem, for the logging monitor
only; the algorithm reads only its own node's rows.

:class:`ThreadNetwork` runs the same per-node loop on threads with queue-based links; it records every
(sender, receiver) pair and refuses collectives inside the loop (the counting communicator of the
tests).
"""
from __future__ import annotations

import os
import queue
import socket
import tempfile
import threading
from types import SimpleNamespace

import numpy as np

from icmlkit.lib.core.errors import IcmlkitError
from icmlkit.lib.solve_decentralized.problem import Problem


def subproblem(prob: Problem, i: int) -> Problem:
    """Node i's own rows of ``prob`` (what its process computes with)."""
    sl = slice(i, i + 1)
    return Problem(n=1, d=[prob.d[i]], p=prob.p, m=prob.m, loss=prob.loss, edges=np.zeros((0, 2), int),
                   edge_weights=np.zeros(0), A=prob.A[sl], b=prob.b[sl], C=prob.C[sl], c=prob.c[sl],
                   Ct=prob.Ct[sl], ct=prob.ct[sl], Q=None if prob.Q is None else prob.Q[sl],
                   q=None if prob.q is None else prob.q[sl], F=None if prob.F is None else [prob.F[i]],
                   y=None if prob.y is None else [prob.y[i]], lam=None if prob.lam is None else prob.lam[sl],
                   weight=None if prob.weight is None else prob.weight[sl],
                   bw=None if prob.bw is None else prob.bw[sl], lb=None if prob.lb is None else prob.lb[sl],
                   bfloor=None if prob.bfloor is None else prob.bfloor[sl])


def _weights(prob: Problem, i: int):
    W = prob.laplacian()
    nb = [j for j in range(prob.n) if j != i and W[i, j] != 0]
    return float(W[i, i]), nb, {j: float(W[i, j]) for j in nb}


def node_loop(rank: int, prob: Problem, setup, comm, iterations: int, monitor=None, dpmm_steps=None):
    """One node's Algorithm 1 (or, with ``dpmm_steps = (rho, c)``, the DPMM baseline [reconstructed]):
    the simulator's code on this node's row, ``comm.mix`` as the link."""
    from icmlkit.lib.solve_decentralized.methods import NodeOps, apapc, dpmm, dpmm_prox

    sub = subproblem(prob, rank)
    ops = NodeOps(sub.A, sub.b, sub.C, sub.c, sub.Ct, sub.ct, sub.grad, setup, comm.mix)
    mon = None  # no logging: nothing global runs in the loop
    if monitor is not None:
        dm, m = prob.dmax, prob.m

        def primal(full):
            return full[:, :dm], full[:, dm + m:]

        def mon(k, local_ops, u):
            full = comm.gather_for_logging(u)
            return monitor(k, SimpleNamespace(primal=primal, cnt=local_ops.cnt), full)

    comm.in_loop = True
    try:
        if dpmm_steps is None:
            u, k = apapc(ops, setup, iterations, mon)
        else:
            rho, c = dpmm_steps
            u, k = dpmm(ops, rho, c, iterations, dpmm_prox(sub, c), mon)
    finally:
        comm.in_loop = False
    return u, k, dict(ops.cnt)


# --------------------------------------------------------------------------- threads (tests)


class ThreadNetwork:
    """Queue links between the graph's neighbours; records who talked to whom."""

    def __init__(self, prob: Problem):
        self.prob = prob
        self.edges = {(int(a), int(b)) for a, b in prob.edges} | {(int(b), int(a)) for a, b in prob.edges}
        self.links = {e: queue.Queue() for e in self.edges}
        self.pairs: set = set()
        self.collectives_in_loop = 0
        self.lock = threading.Lock()

    def send(self, src, dst, V):
        with self.lock:
            self.pairs.add((src, dst))
        if (src, dst) not in self.edges:
            raise IcmlkitError(f"node {src} sent to non-neighbour {dst}")
        self.links[(src, dst)].put(np.array(V, copy=True))

    def recv(self, src, dst):
        return self.links[(src, dst)].get(timeout=120)


class ThreadComm:
    def __init__(self, net: ThreadNetwork, rank: int):
        self.net, self.rank = net, rank
        self.wii, self.nb, self.w = _weights(net.prob, rank)
        self.in_loop = False

    def mix(self, V):
        for j in self.nb:
            self.net.send(self.rank, j, V)
        out = self.wii * V
        for j in self.nb:
            out = out + self.w[j] * self.net.recv(j, self.rank)
        return out

    def all_reduce(self, value):
        if self.in_loop:
            self.net.collectives_in_loop += 1
            raise IcmlkitError("all_reduce inside the algorithm's loop")
        raise NotImplementedError

    def gather_for_logging(self, u):
        self.net.collectives_in_loop += 1
        raise IcmlkitError("the thread network runs without global logging")


def run_threads(prob: Problem, setup, iterations: int, dpmm_steps=None) -> dict:
    """Every node's loop on its own thread (fixed iteration count, no logging); Algorithm 1, or DPMM
    with ``dpmm_steps = (rho, c)``."""
    net = ThreadNetwork(prob)
    results, errors = {}, []

    def work(i):
        try:
            results[i] = node_loop(i, prob, setup, ThreadComm(net, i), iterations, dpmm_steps=dpmm_steps)
        except Exception as exc:  # noqa: BLE001 - reported to the caller
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(prob.n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    u = np.concatenate([results[i][0] for i in range(prob.n)])
    return {"u": u, "pairs": net.pairs, "collectives_in_loop": net.collectives_in_loop,
            "counters": results[0][2], "iterations": results[0][1]}


# --------------------------------------------------------------------------- torch.distributed


class TorchComm:
    """Neighbour exchange by ``dist.batch_isend_irecv`` (gloo on CPU)."""

    def __init__(self, prob: Problem, rank: int, logging: bool):
        self.rank = rank
        self.wii, self.nb, self.w = _weights(prob, rank)
        self.logging = logging
        self.in_loop = False
        self.world = prob.n

    def mix(self, V):
        import torch
        import torch.distributed as dist

        t = torch.from_numpy(np.ascontiguousarray(V, dtype=np.float64))
        bufs = {j: torch.empty_like(t) for j in self.nb}
        ops = [dist.P2POp(dist.isend, t, j) for j in self.nb] + [dist.P2POp(dist.irecv, bufs[j], j) for j in self.nb]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        out = self.wii * V
        for j in self.nb:
            out = out + self.w[j] * bufs[j].numpy()
        return out

    def gather_for_logging(self, u):
        """Global logging (outside the algorithm's data path): every rank gets all iterates."""
        import torch
        import torch.distributed as dist

        if not self.logging:
            raise IcmlkitError("global logging is off")
        t = torch.from_numpy(np.ascontiguousarray(u))
        parts = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(parts, t)
        return np.concatenate([p.numpy() for p in parts])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, prob, setup, iterations, port, outdir, monitor_cfg):
    import json

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=prob.n)
    try:
        monitor = None
        if monitor_cfg is not None:
            from icmlkit.lib.solve_decentralized.solve import Monitor

            ref, cfg = monitor_cfg
            monitor = Monitor(prob, ref, cfg)
        comm = TorchComm(prob, rank, logging=monitor is not None)
        u, k, cnt = node_loop(rank, prob, setup, comm, iterations, monitor)
        # collect the result on rank 0 (after the loop)
        t = torch.from_numpy(np.ascontiguousarray(u))
        parts = [torch.empty_like(t) for _ in range(prob.n)] if rank == 0 else None
        dist.gather(t, parts, dst=0)
        if rank == 0:
            full = np.concatenate([p.numpy() for p in parts])
            np.save(os.path.join(outdir, "u.npy"), full)
            rows = monitor.rows if monitor is not None else []
            if monitor is not None:
                monitor.finish()
                rows = monitor.rows
            with open(os.path.join(outdir, "meta.json"), "w") as fh:
                json.dump({"iterations": k, "counters": cnt, "trace": rows}, fh)
    finally:
        dist.destroy_process_group()


def run_dist(prob: Problem, setup, iterations: int, monitor_cfg=None, nproc: int | None = None) -> dict:
    """Launch one gloo process per node on localhost (torch.multiprocessing) and run Algorithm 1;
    ``monitor_cfg`` = (reference, SolveConfig) turns on global logging and the stopping test."""
    import json

    import torch.multiprocessing as mp

    from icmlkit.lib.core.errors import UsageError

    if nproc is not None and nproc != prob.n:
        raise UsageError(f"--nproc {nproc}: the problem has {prob.n} nodes and the backend runs one process per node")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return _under_torchrun(prob, setup, iterations, monitor_cfg)
    with tempfile.TemporaryDirectory(prefix="icmlkit-decentral-") as outdir:
        port = _free_port()
        mp.start_processes(_worker, args=(prob, setup, iterations, port, outdir, monitor_cfg), nprocs=prob.n,
                           join=True, start_method="fork")
        full = np.load(os.path.join(outdir, "u.npy"))
        with open(os.path.join(outdir, "meta.json")) as fh:
            meta = json.load(fh)
    dm, m = prob.dmax, prob.m
    return {"u": full, "x": full[:, :dm], "X": full[:, dm + m:], "iterations": meta["iterations"],
            "counters": meta["counters"], "trace": meta["trace"]}


def _under_torchrun(prob: Problem, setup, iterations: int, monitor_cfg=None) -> dict:
    """Already one process per node (torchrun, possibly across machines: MASTER_ADDR/PORT): run this
    rank's node, then gather the iterates (after the loop) and share them with every rank."""
    import torch
    import torch.distributed as dist

    from icmlkit.lib.core.errors import UsageError

    world = int(os.environ["WORLD_SIZE"])
    if world != prob.n:
        raise UsageError(f"torchrun started {world} processes; the problem has {prob.n} nodes (one process per node)")
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    monitor = None
    if monitor_cfg is not None:
        from icmlkit.lib.solve_decentralized.solve import Monitor

        monitor = Monitor(prob, *monitor_cfg)
    comm = TorchComm(prob, rank, logging=monitor is not None)
    u, k, cnt = node_loop(rank, prob, setup, comm, iterations, monitor)
    t = torch.from_numpy(np.ascontiguousarray(u))
    parts = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(parts, t)
    full = np.concatenate([p.numpy() for p in parts])
    rows = []
    if monitor is not None:
        monitor.finish()
        rows = monitor.rows
    dm, m = prob.dmax, prob.m
    return {"u": full, "x": full[:, :dm], "X": full[:, dm + m:], "iterations": k, "counters": cnt, "trace": rows}
