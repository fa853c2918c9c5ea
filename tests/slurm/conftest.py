"""The Slurm tests: a real two-node cluster (``slurmkit.MiniCluster``) per test module, or a one-line skip
where Slurm is not installed (``TRIALS_REQUIRE_SLURM=1``, set by ``.ci/run`` once it installed it, makes
that a failure); marks the tests ``slurm``."""

import os
from pathlib import Path

import pytest
from slurmkit import MiniCluster, need_slurm

PG_URL = os.environ.get("TRIALS_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def pytest_collection_modifyitems(items):
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slurm)


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


@pytest.fixture
def pg_url():
    try:
        import psycopg2
    except ImportError:
        pytest.skip("psycopg2 is not installed; pip install psycopg2-binary")
    try:
        psycopg2.connect(PG_URL.replace("postgresql+psycopg2://", "postgresql://"), connect_timeout=3).close()
    except psycopg2.OperationalError:
        from trials.storage_url import redact

        pytest.skip(f"no PostgreSQL server answers at {redact(PG_URL)}; set TRIALS_TEST_POSTGRES_URL to one")
    return PG_URL
