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
def pg_url():
    url = os.environ.get(URL_ENV, DEFAULT_URL)
    try:
        import psycopg2
    except ImportError:
        pytest.skip(f"psycopg2 is not installed; pip install psycopg2-binary and set {URL_ENV}")
    dsn = url.replace("postgresql+psycopg2://", "postgresql://")
    try:
        psycopg2.connect(dsn, connect_timeout=3).close()
    except psycopg2.OperationalError:
        from trials.storage_url import redact

        pytest.skip(f"no PostgreSQL server answers at {redact(url)}; set {URL_ENV} to one")
    return url


@pytest.fixture
def job_id():
    return "t" + uuid.uuid4().hex[:12]  # every test its own job (study): tests never collide

