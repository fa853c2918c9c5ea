"""The Slurm tests: a real two-node cluster (``slurmkit.MiniCluster``) per test module, or a one-line skip
where Slurm is not installed (``TRIALS_REQUIRE_SLURM=1``, set by ``.ci/run`` once it installed it, makes
that a failure); marks the tests ``slurm``."""

import os
from pathlib import Path

import pytest
from slurmkit import MiniCluster, missing


def pytest_collection_modifyitems(items):
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slurm)


def need_slurm() -> None:
    why = missing()
    if why is not None:
        if os.environ.get("TRIALS_REQUIRE_SLURM") == "1":
            pytest.fail(f"TRIALS_REQUIRE_SLURM=1 but {why}")
        pytest.skip(why)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    need_slurm()
    c = MiniCluster(tmp_path_factory.mktemp("slurm")).start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def slurm_env(cluster, monkeypatch):
    """This test's commands (and the controllers it starts) reach the module's cluster."""
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    return cluster.env
