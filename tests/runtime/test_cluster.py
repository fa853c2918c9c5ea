"""Tests for trials.runtime.cluster: CLUSTER_SPEC / TF_CONFIG / TRIALS_REPLICA / RANK parsing."""

import json

import pytest

from trials.errors import ConfigError
from trials.runtime.cluster import ClusterRole, parse_cluster_spec, parse_tf_config, read_cluster_role

DOC_EXAMPLE = {
    "cluster": {"workerpool0": ["cmle-training-workerpool0-ab-0:2222"],
                "workerpool1": ["cmle-training-workerpool1-ab-0:2222",
                                "cmle-training-workerpool1-ab-1:2222"]},
    "environment": "cloud",
    "task": {"type": "workerpool0", "index": 0, "trial": "7"},
    "job": {"worker_pool_specs": []},
}


def test_no_variables_means_the_single_primary():
    role = read_cluster_role({})
    assert role == ClusterRole()
    assert role.is_primary and role.replica == "workerpool0-0" and role.world_size == 1


def test_cluster_spec_primary_from_the_doc_example():
    role = read_cluster_role({"CLUSTER_SPEC": json.dumps(DOC_EXAMPLE)})
    assert (role.pool, role.index, role.trial, role.world_size, role.rank) == (
        "workerpool0", 0, "7", 3, 0)
    assert role.is_primary


def test_cluster_spec_worker_is_not_primary_and_ranked_after_pool0():
    doc = dict(DOC_EXAMPLE, task={"type": "workerpool1", "index": 1, "trial": "7"})
    role = parse_cluster_spec(json.dumps(doc))
    assert not role.is_primary
    assert role.rank == 2 and role.replica == "workerpool1-1"


def test_cluster_spec_with_job_as_string_and_empty_trial():
    doc = dict(DOC_EXAMPLE, job="{}", task={"type": "workerpool0", "index": 0, "trial": ""})
    role = parse_cluster_spec(json.dumps(doc))
    assert role.trial is None and role.is_primary


def test_cluster_spec_wins_over_tf_config():
    tf = {"cluster": {"chief": ["a"], "worker": ["b"]}, "task": {"type": "worker", "index": 0}}
    role = read_cluster_role({"CLUSTER_SPEC": json.dumps(DOC_EXAMPLE), "TF_CONFIG": json.dumps(tf)})
    assert role.pool == "workerpool0"


@pytest.mark.parametrize("task_type, index, primary, rank", [
    ("chief", 0, True, 0), ("master", 0, True, 0), ("worker", 0, False, 1), ("worker", 1, False, 2),
])
def test_tf_config_roles(task_type, index, primary, rank):
    doc = {"cluster": {"chief": ["c:1"], "worker": ["w0:1", "w1:1"]},
           "task": {"type": task_type, "index": index, "trial": "3"}}
    role = parse_tf_config(json.dumps(doc))
    assert role.is_primary is primary
    assert role.rank == rank and role.trial == "3"


def test_trials_replica_name():
    role = read_cluster_role({"TRIALS_REPLICA": "workerpool2-3"})
    assert (role.pool, role.index, role.is_primary) == ("workerpool2", 3, False)


def test_rank_and_world_size_variables_override():
    role = read_cluster_role({"CLUSTER_SPEC": json.dumps(DOC_EXAMPLE), "WORLD_SIZE": "4",
                              "RANK": "0"})
    assert role.world_size == 4 and role.rank == 0


@pytest.mark.parametrize("env, needle", [
    ({"CLUSTER_SPEC": "{not json"}, "$CLUSTER_SPEC must be JSON"),
    ({"CLUSTER_SPEC": "[1]"}, "must be a JSON object"),
    ({"CLUSTER_SPEC": '{"task": {"index": "x"}}'}, "task.index"),
    ({"TF_CONFIG": '{"task": []}'}, "$TF_CONFIG"),
    ({"TRIALS_REPLICA": "primary"}, "workerpool0-0"),
    ({"WORLD_SIZE": "two"}, "must be integers"),
    ({"WORLD_SIZE": "2", "RANK": "5"}, "rank < world_size"),
])
def test_malformed_variables_name_the_variable(env, needle):
    with pytest.raises(ConfigError, match=None) as info:
        read_cluster_role(env)
    assert needle in str(info.value)
