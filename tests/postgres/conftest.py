"""PostgreSQL fixtures: a server URL (or a one-line skip) and unique job names; marks tests `postgres`."""

import os
import uuid
from pathlib import Path

import pytest

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
URL_ENV = "TRIALS_TEST_POSTGRES_URL"


def pytest_collection_modifyitems(items):
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory):
    url = os.environ.get(URL_ENV, DEFAULT_URL)
    try:
        import psycopg2
    except ImportError:
        pytest.skip(f"psycopg2 is not installed; pip install psycopg2-binary and set {URL_ENV}")
    dsn = url.replace("postgresql+psycopg2://", "postgresql://")
    try:
        conn = psycopg2.connect(dsn, connect_timeout=3)
    except psycopg2.OperationalError:
        from trials.storage_url import redact

        pytest.skip(f"no PostgreSQL server answers at {redact(url)}; set {URL_ENV} to one")
    try:
        _create_schema(conn, url, tmp_path_factory.mktemp("pg-schema"))
    finally:
        conn.close()
    return url


SCHEMA_LOCK = 0x7472_6961  # a pg_advisory_lock key of these tests alone


def _create_schema(conn, url, folder):
    """Optuna's tables and the lease table, made by one pytest process at a time: parallel workers
    (``-n``) opening a fresh database at once would race on CREATE TABLE (a duplicate-key error)."""
    from trials.controller.jobs import registry as controller
    from trials.spec.load import loads_spec
    from trials.study.database.leases import SharedJob

    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK,))
        try:
            spec = loads_spec("metrics: {loss: minimize}\nparameters:\n  x: {type: double, min: 0, max: 1}\n"
                              "max_trial_count: 1\n", source="schema.yaml")
            h = controller.create_job(spec, root=str(folder), job_id="schema-" + uuid.uuid4().hex[:12],
                                      spec_path=None, storage=url, base_output_dir=None, project_number=None,
                                      local_command=["python", "x.py"], seed=1)
            SharedJob(h.store)
        finally:
            cur.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK,))


@pytest.fixture
def job_id():
    return "t" + uuid.uuid4().hex[:12]  # every test its own job (study): tests never collide

