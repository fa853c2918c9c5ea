"""Data-parallel training across a trial's replicas: numpy gradients averaged over local sockets.

Every replica trains on its own shard. Each epoch the workers (RANK 1..WORLD_SIZE-1) send their
shard's gradient to the primary (RANK 0) at MASTER_ADDR:MASTER_PORT, which averages them with its
own, weighted by shard size, and sends the average back; every replica applies the same update, so
the weights stay identical and the result equals full-batch training on one machine. Only the
primary reports the metric. Like TensorFlow parameter servers, the workers then stay up until they
are told to stop: the trial ends when the primary exits 0 and the controller stops the workers, as
Vertex AI does. Without WORLD_SIZE (a plain `python train.py`) it trains alone.
"""

import argparse
import json
import os
import signal
import socket
import struct
import sys
import time

import hypertune
import numpy as np

HEADER = struct.Struct("!Q")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--learning_rate", type=float, default=0.1)
    parser.add_argument("--l2", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--n_samples", type=int, default=3000)
    parser.add_argument("--connect_timeout_s", type=float, default=30.0)
    return parser.parse_args(argv)


def make_data(n, d=10, seed=0):
    rng = np.random.default_rng(seed)
    w_true = rng.normal(size=d)
    x = rng.normal(size=(n, d))
    y = x @ w_true + 0.5 * rng.normal(size=n)
    cut = int(0.8 * n)
    return x[:cut], y[:cut], x[cut:], y[cut:]


def send(sock, array):
    data = np.ascontiguousarray(array, dtype=np.float64).tobytes()
    sock.sendall(HEADER.pack(len(data)) + data)


def recv(sock):
    (size,) = HEADER.unpack(_exactly(sock, HEADER.size))
    return np.frombuffer(_exactly(sock, size), dtype=np.float64)


def _exactly(sock, n):
    chunks, left = [], n
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise ConnectionError("peer closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def connect(addr, port, timeout_s):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection((addr, port), timeout=timeout_s)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # the primary may not be listening yet


def cluster():
    """(rank, world_size, master address, master port) from the variables Vertex sets."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    spec = json.loads(os.environ.get("CLUSTER_SPEC", "{}"))
    task = spec.get("task", {})
    print(f"rank {rank} of {world}: task {task.get('type', 'local')}-{task.get('index', 0)}", flush=True)
    return rank, world, os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "0"))


def main(argv=None):
    args = parse_args(argv)
    rank, world, addr, port = cluster()
    x, y, x_val, y_val = make_data(args.n_samples)
    x, y = x[rank::world], y[rank::world]  # this replica's shard
    peers = []
    if world > 1 and rank == 0:
        server = socket.create_server((addr, port))
        server.settimeout(args.connect_timeout_s)
        while len(peers) < world - 1:
            conn, _ = server.accept()
            conn.settimeout(None)
            peers.append(conn)
        server.close()
    elif world > 1:
        # The controller stops the workers as soon as the primary exits 0, which may be before a
        # worker has applied the last update: the handler is set before training, not after it.
        signal.signal(signal.SIGTERM, _on_term)
        link = connect(addr, port, args.connect_timeout_s)
        link.settimeout(None)
    w = np.zeros(x.shape[1])
    reporter = hypertune.HyperTune() if rank == 0 else None
    for epoch in range(1, args.epochs + 1):
        # the gradient of the summed squared error on this shard, and the shard's size
        local = np.append(x.T @ (x @ w - y), len(x))
        if world > 1 and rank == 0:
            total = local + sum(recv(p) for p in peers)
            for p in peers:
                send(p, total)
        elif world > 1:
            send(link, local)
            total = recv(link)
        else:
            total = local
        grad = total[:-1] / total[-1] + args.l2 * w
        w = w - args.learning_rate * grad
        if rank == 0:
            val_loss = float(np.mean((x_val @ w - y_val) ** 2))
            print(f"epoch {epoch}: val_loss={val_loss:.6f} (gradients from {world} replicas)", flush=True)
            reporter.report_hyperparameter_tuning_metric(
                hyperparameter_metric_tag="val_loss", metric_value=val_loss, global_step=epoch)
    if rank == 0:
        for p in peers:
            p.close()
        return 0
    link.close()
    serve_until_stopped(rank)
    return 0


_STOP = {"rank": 0, "requested": False, "done": False}


def _on_term(signum, frame):
    _STOP["requested"] = True
    if _STOP["done"]:
        _stopped()


def _stopped():
    print(f"rank {_STOP['rank']}: SIGTERM received after the primary finished; exiting", flush=True)
    sys.exit(0)


def serve_until_stopped(rank):
    _STOP["rank"] = rank
    print(f"rank {rank}: training done; waiting to be stopped", flush=True)
    _STOP["done"] = True
    if _STOP["requested"]:  # the stop came while this worker finished its last update
        _stopped()
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
