"""The replica's place in its trial's cluster, read from ``CLUSTER_SPEC`` / ``TF_CONFIG`` / ``RANK``."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from trials import protocol
from trials.errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing is not loaded on a trial's start path
    from typing import Any

PRIMARY_POOL = "workerpool0"
_POOL_ORDER = ("workerpool0", "workerpool1", "workerpool2", "workerpool3")
_TF_PRIMARY_TYPES = ("chief", "master")
_TF_ORDER = ("chief", "master", "worker", "ps", "evaluator")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterRole:
    """Where this process sits: pool, index in the pool, global rank, and the trial it serves.

    Example:
        >>> role = parse_cluster_spec('{"cluster": {"workerpool0": ["h:2222"], "workerpool1": '
        ...     '["a:2222", "b:2222"]}, "task": {"type": "workerpool1", "index": 1, "trial": "3"}}')
        >>> role.replica, role.rank, role.world_size, role.is_primary, role.trial
        ('workerpool1-1', 2, 3, False, '3')
    """

    pool: str = PRIMARY_POOL
    index: int = 0
    trial: str | None = None
    world_size: int = 1
    rank: int = 0
    source: str = "default"  # which variable the role came from

    def __post_init__(self) -> None:
        if self.index < 0 or self.rank < 0 or self.world_size < 1 or self.rank >= self.world_size:
            raise ConfigError(
                f"cluster role must have 0 <= index, 0 <= rank < world_size, got index={self.index}, "
                f"rank={self.rank}, world_size={self.world_size} (from {self.source})"
            )

    @property
    def is_primary(self) -> bool:
        """The primary replica (workerpool0 index 0, TF chief/master) reports the trial's metrics."""
        if self.pool in _TF_PRIMARY_TYPES:
            return self.index == 0
        return self.pool == PRIMARY_POOL and self.index == 0

    @property
    def replica(self) -> str:
        """The replica name used in Vertex messages and log labels, e.g. ``workerpool0-0``."""
        return f"{self.pool}-{self.index}"


def _task(doc: object, var: str) -> tuple[dict[str, Any], dict[str, Any]]:
    if not isinstance(doc, dict):
        raise ConfigError(f"${var} must be a JSON object, got {type(doc).__name__}")
    cluster = doc.get("cluster", {})
    task = doc.get("task", {})
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        raise ConfigError(f"${var} must hold objects under 'cluster' and 'task', got {doc!r:.200}")
    return cluster, task


def _load(text: str, var: str) -> object:
    try:
        return json.loads(text)
    except ValueError as err:
        raise ConfigError(f"${var} must be JSON, got {text!r:.200}: {err}") from err


def _index(task: dict[str, Any], var: str) -> int:
    index = task.get("index", 0)
    if isinstance(index, str) and index.isdigit():
        index = int(index)
    if isinstance(index, bool) or not isinstance(index, int):
        raise ConfigError(f"task.index in ${var} must be an integer, got {index!r}")
    return index


def _trial(task: dict[str, Any]) -> str | None:
    trial = task.get("trial")
    return str(trial) if trial not in (None, "") else None


def _rank(order: tuple[str, ...], cluster: dict[str, Any], pool: str, index: int) -> tuple[int, int]:
    """Global (rank, world size): pools in their canonical order, replicas in list order."""
    sizes = {name: len(hosts) for name, hosts in cluster.items() if isinstance(hosts, list)}
    names = [n for n in order if n in sizes] + sorted(n for n in sizes if n not in order)
    world = sum(sizes.values())
    if pool not in sizes:
        return index, max(world, index + 1)
    offset = sum(sizes[n] for n in names[: names.index(pool)])
    return offset + index, max(world, 1)


def parse_cluster_spec(text: str) -> ClusterRole:
    """Parse Vertex's ``CLUSTER_SPEC`` (``{"cluster": {...}, "task": {"type", "index", "trial"}}``)."""
    var = protocol.ENV_CLUSTER_SPEC
    cluster, task = _task(_load(text, var), var)
    pool = str(task.get("type") or PRIMARY_POOL)
    index = _index(task, var)
    rank, world = _rank(_POOL_ORDER, cluster, pool, index)
    return ClusterRole(pool=pool, index=index, trial=_trial(task), world_size=world, rank=rank,
                      source=f"${var}")


def parse_tf_config(text: str) -> ClusterRole:
    """Parse ``TF_CONFIG`` (task type chief/master/worker/ps/evaluator); chief or master is primary."""
    var = protocol.ENV_TF_CONFIG
    cluster, task = _task(_load(text, var), var)
    pool = str(task.get("type") or "chief")
    index = _index(task, var)
    rank, world = _rank(_TF_ORDER, cluster, pool, index)
    return ClusterRole(pool=pool, index=index, trial=_trial(task), world_size=world, rank=rank,
                      source=f"${var}")


def parse_replica_name(name: str) -> ClusterRole:
    """``workerpool1-0`` -> pool ``workerpool1``, index 0 (from ``$TRIALS_REPLICA``)."""
    pool, sep, index = name.rpartition("-")
    if not sep or not pool or not index.isdigit():
        raise ConfigError(
            f"${protocol.ENV_REPLICA} must look like workerpool0-0, got {name!r}"
        )
    return ClusterRole(pool=pool, index=int(index), world_size=int(index) + 1, rank=int(index),
                      source=f"${protocol.ENV_REPLICA}")


def read_cluster_role(environ: Mapping[str, str] | None = None) -> ClusterRole:
    """The role from ``CLUSTER_SPEC``, else ``TF_CONFIG``, else ``TRIALS_REPLICA``, else primary.

    ``WORLD_SIZE``/``RANK`` (set on multi-replica jobs) override the computed world size and rank.

    Raises:
        ConfigError: a variable is set but malformed; the message names the variable.
    """
    env = os.environ if environ is None else environ
    if env.get(protocol.ENV_CLUSTER_SPEC):
        role = parse_cluster_spec(env[protocol.ENV_CLUSTER_SPEC])
    elif env.get(protocol.ENV_TF_CONFIG):
        role = parse_tf_config(env[protocol.ENV_TF_CONFIG])
    elif env.get(protocol.ENV_REPLICA):
        role = parse_replica_name(env[protocol.ENV_REPLICA])
    else:
        role = ClusterRole()
    world, rank = env.get(protocol.ENV_WORLD_SIZE), env.get(protocol.ENV_RANK)
    if world is None and rank is None:
        return role
    try:
        world_size = int(world) if world is not None else role.world_size
        rank_value = int(rank) if rank is not None else role.rank
    except ValueError as err:
        raise ConfigError(
            f"${protocol.ENV_WORLD_SIZE}/${protocol.ENV_RANK} must be integers, got "
            f"{world!r}/{rank!r}"
        ) from err
    return ClusterRole(pool=role.pool, index=role.index, trial=role.trial, world_size=world_size,
                       rank=rank_value, source=f"{role.source}+${protocol.ENV_RANK}")
