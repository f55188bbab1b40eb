"""Drive one communication round from the phases a method declares (:mod:`bench.engine.protocol`), delivering
every message and counting it in the run's ledger (:mod:`bench.engine.ledger`): the only path between a method's
clients and its server, so no method's communication goes uncounted."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.algorithms import Algorithm
from bench.engine.ledger import Ledger
from bench.engine.protocol import Exchange, Lockstep, Metrics
from bench.engine.state import Client, Server
from bench.errors import BenchError


def run_round(algorithm: Algorithm[Any, Any, Any, Any], round_index: int, server: Server[Any],
              clients: Sequence[Client[Any]], ledger: Ledger) -> Metrics:
    """The round's phases in order over the selected ``clients`` (sorted by id); the round's metrics, those the
    method's ``metrics_order`` names first."""
    phases = algorithm.phases(round_index)
    for phase in phases:
        if isinstance(phase, Lockstep) and len(clients) < phase.min_clients:
            raise BenchError(f"{algorithm.name} needs at least {phase.min_clients} clients in a round, got "
                             f"{len(clients)}; raise partition.num_clients or participation.fraction")
    row: Metrics = {}
    for phase in phases:
        row.update(exchange(algorithm, phase, round_index, server, clients, ledger) if isinstance(phase, Exchange)
                   else lockstep(phase, round_index, server, clients, ledger))
    first = [k for k in algorithm.metrics_order if k in row]
    return {**{k: row[k] for k in first}, **row}


def exchange(algorithm: Algorithm[Any, Any, Any, Any], phase: Exchange[Any, Any, Any, Any], round_index: int,
             server: Server[Any], clients: Sequence[Client[Any]], ledger: Ledger) -> Metrics:
    """Server → each taking-part client → server (:class:`~bench.engine.protocol.Exchange`)."""
    taking = set(phase.who(server, [c.cid for c in clients])) if phase.who is not None else None
    members = [c for c in clients if taking is None or c.cid in taking]
    done: dict[int, tuple[Any, Metrics]] = {}
    if phase.work_together is not None and not phase.sequential and members:
        messages = []
        for client in members:
            messages.append(phase.send(round_index, server, client.cid))
            ledger.down(messages[-1])
        for client, (upload, metrics) in zip(members, phase.work_together(round_index, members, messages)):
            ledger.up(upload)
            done[client.cid] = upload, metrics
    else:
        order = ([members[i] for i in algorithm.ctx.client_order(round_index, len(members))] if phase.sequential
                 else members)
        for client in order:
            message = phase.send(round_index, server, client.cid)
            ledger.down(message)
            upload, metrics = phase.work(round_index, client, message)
            ledger.up(upload)
            if phase.sequential and phase.take_each is not None:
                phase.take_each(round_index, server, upload)
            done[client.cid] = upload, metrics
    row = mean_metrics([done[c.cid][1] for c in members])
    row.update(phase.take(round_index, server, [done[c.cid][0] for c in members]))
    return row


def lockstep(phase: Lockstep[Any, Any, Any, Any, Any], round_index: int, server: Server[Any],
             clients: Sequence[Client[Any]], ledger: Ledger) -> Metrics:
    """Iterations on shared public batches (:class:`~bench.engine.protocol.Lockstep`)."""
    loops = [phase.start(round_index, client) for client in clients]
    cids = [c.cid for c in clients]
    losses: list[float] = []
    served: dict[str, list[float]] = {}
    for i in range(phase.steps):
        x = phase.batch(i)
        outputs = [phase.forward(client, x) for client in clients]
        uploads = [phase.upload(client, out) for client, out in zip(clients, outputs)]
        for upload in uploads:
            ledger.up(upload)
        replies, metrics = phase.serve(round_index, server, cids, x, uploads)
        for reply in replies:
            ledger.down(reply)
        for name, value in metrics.items():
            served.setdefault(name, []).append(value)
        for client, loop, out, reply in zip(clients, loops, outputs, replies):
            losses.append(loop.run([x], lambda step, batch: phase.loss(step, client, batch, out, reply)))
    row = {phase.loss_name: sum(losses) / len(losses)} if losses else {}
    return {**row, **{k: sum(v) / len(v) for k, v in served.items()}}


def mean_metrics(per_client: list[Metrics]) -> Metrics:
    """Each metric's mean over the clients that report it, in the given (client-id) order."""
    names = list(dict.fromkeys(name for metrics in per_client for name in metrics))
    values = {name: [m[name] for m in per_client if name in m] for name in names}
    return {name: sum(v) / len(v) for name, v in values.items()}
