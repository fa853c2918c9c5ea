"""What the controller and a node's entry share about one submission: the launch file and the files
each replica's entry writes back (its address, its exit), all on the cluster's shared path.

Layout under ``<job folder>/slurm/`` (the controller's, never the trial folder a trainer is given):

- ``<submission>/launch.json``: the replicas of the submission in task order (argv, env, cwd, logs),
  the trial's replicas in rank order, where to write back; written by the controller, read once by
  each entry.
- ``<submission>/exit-<replica>.json``: the replica's Vertex-style exit status, written once by its entry
  after the trainer's process group is gone (atomically: a reader sees all of it or nothing).
- ``<submission>/signal-<replica>``: a signal the controller asks one replica's entry to forward
  (``TERM`` or ``KILL``) when the rest of the submission keeps running.
- ``t<trial>/addr-<replica>.json``: where each replica of the trial listens (host and port), rewritten by
  every attempt's entry; the cluster variables of a replica are built from these.

Every file here is read as data a trainer may have forged (same user, same shared folder): regular files
only, links refused, sizes bounded, fields checked; a bad file reads as absent. A well-formed exit file is
still only a claim: :mod:`verdict` decides when it counts (Slurm's word on the job wins).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trials import files, protocol

FORMAT = 1
MAX_LAUNCH_BYTES = 16 << 20
MAX_SMALL_BYTES = 64 << 10
SIGNALS = ("TERM", "KILL")


@dataclass(frozen=True, slots=True)
class ExitNote:
    """What a replica's entry wrote when its trainer ended."""

    status: int  # Vertex-style: the code, or 128 + the signal
    oom: bool  # killed by the entry for going over its memory limit
    wall: float  # when the trainer exited (the node's wall clock)
    node: str  # the Slurm node it ran on
    leftovers: tuple[str, ...]  # "pid (name)" of what outlived the trainer (killed by the entry)


def slurm_dir(job_dir: str) -> str:
    return os.path.join(os.path.abspath(job_dir), "slurm")


def submission_dir(job_dir: str, submission: str) -> str:
    return os.path.join(slurm_dir(job_dir), submission)


def rendezvous_dir(job_dir: str, trial_id: str) -> str:
    return os.path.join(slurm_dir(job_dir), f"t{trial_id}")


def exit_path(sub_dir: str, replica: str) -> str:
    return os.path.join(sub_dir, f"exit-{replica}.json")


def signal_path(sub_dir: str, replica: str) -> str:
    return os.path.join(sub_dir, f"signal-{replica}")


def addr_path(rdv_dir: str, replica: str) -> str:
    return os.path.join(rdv_dir, f"addr-{replica}.json")


def read_json(path: str, max_bytes: int = MAX_SMALL_BYTES) -> Any:
    """A JSON file, or None when it is missing, not a regular file, too big or not JSON."""
    try:
        data = files.read_regular(path, max_bytes=max_bytes + 1)
    except OSError:
        return None
    if len(data) > max_bytes:
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def write_json(path: str, data: Any, *, mode: int = 0o644) -> None:
    files.write_atomic(path, json.dumps(data, separators=(",", ":")).encode("utf-8"), mode=mode)


def read_exit(path: str) -> ExitNote | None:
    """The exit a replica's entry wrote, or None (missing, or not what an entry writes)."""
    raw = read_json(path)
    if not isinstance(raw, dict):
        return None
    status, wall = raw.get("status"), raw.get("wall")
    if not isinstance(status, int) or isinstance(status, bool) or not 0 <= status <= 255:
        return None
    if not isinstance(wall, int | float) or isinstance(wall, bool) or not math.isfinite(wall):
        return None
    leftovers = raw.get("leftovers")
    left = tuple(str(x)[:200] for x in leftovers[:20]) if isinstance(leftovers, list) else ()
    return ExitNote(status=status, oom=raw.get("oom") is True, wall=float(wall),
                    node=str(raw.get("node", ""))[:100], leftovers=left)


def read_address(path: str, submission: str | None = None) -> tuple[str, int] | None:
    """A replica's address (host, port), or None; with ``submission``, only one that attempt wrote."""
    raw = read_json(path)
    if not isinstance(raw, dict):
        return None
    host, port = raw.get("host"), raw.get("port")
    if submission is not None and raw.get("submission") != submission:
        return None
    if not isinstance(host, str) or not host or len(host) > 253 or any(c in host for c in " :/\n\t\"',"):
        return None
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        return None
    return host, port


def with_addresses(env: Mapping[str, str], addresses: Mapping[str, tuple[str, int]]) -> dict[str, str]:
    """A replica's environment with the cluster variables naming where its peers run now.

    ``addresses``: replica name (``workerpool1-0``) -> (host, port). CLUSTER_SPEC's and TF_CONFIG's
    cluster lists are rewritten in place (the same order and roles); MASTER_ADDR/MASTER_PORT name the
    primary (``workerpool0-0``). A replica not in ``addresses`` keeps what it had.
    """
    out = dict(env)
    for key in (protocol.ENV_CLUSTER_SPEC, protocol.ENV_TF_CONFIG):
        text = out.get(key)
        if not text:
            continue
        try:
            spec = json.loads(text)
            cluster = spec["cluster"]
        except (ValueError, KeyError, TypeError):
            continue
        if not isinstance(cluster, dict):
            continue
        pools = _pool_order(cluster, key)
        for role, pool in pools.items():
            entries = cluster.get(role)
            if not isinstance(entries, list):
                continue
            for j in range(len(entries)):
                found = addresses.get(protocol.replica_name(pool, j))
                if found is not None:
                    entries[j] = f"{found[0]}:{found[1]}"
        out[key] = json.dumps(spec)
    primary = addresses.get(protocol.replica_name(0, 0))
    if primary is not None and protocol.ENV_MASTER_ADDR in out:
        out[protocol.ENV_MASTER_ADDR], out[protocol.ENV_MASTER_PORT] = primary[0], str(primary[1])
    return out


_TF_POOLS = {"chief": 0, "worker": 1, "ps": 2, "evaluator": 3}


def _pool_order(cluster: Mapping[str, Any], key: str) -> dict[str, int]:
    """Which worker pool each role of a cluster variable lists (CLUSTER_SPEC: workerpoolN; TF_CONFIG:
    chief/worker/ps as Vertex maps pools 0/1/2)."""
    if key == protocol.ENV_CLUSTER_SPEC:
        return {role: int(role[len("workerpool"):]) for role in cluster
                if role.startswith("workerpool") and role[len("workerpool"):].isdigit()}
    return {role: _TF_POOLS[role] for role in cluster if role in _TF_POOLS}


def launch_record(*, submission: str, trial_id: str, trial_dir: str, rendezvous: str,
                  replicas: Sequence[Mapping[str, Any]], ranks: Sequence[str],
                  wait_s: float) -> dict[str, Any]:
    """The launch file's content (``replicas``: the submission's, in task order; ``ranks``: all the
    trial's replica names in rank order)."""
    return {"format": FORMAT, "submission": submission, "trial_id": trial_id, "trial_dir": trial_dir,
            "rendezvous": rendezvous, "replicas": [dict(r) for r in replicas], "ranks": list(ranks),
            "wait_s": wait_s}
