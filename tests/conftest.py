"""Suite-wide settings."""

import pytest


def pytest_collection_modifyitems(items):
    """The tests marked ``long`` run first: parallel workers (``-n``) then finish together, instead of
    one of them starting a minute-long test when the others are done."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable: the rest keep their order


@pytest.fixture(autouse=True)
def _no_cloud_storage_endpoint(monkeypatch):
    """The gcs extra is installed for its tests; elsewhere its endpoint (about 0.5 s per sweep) stays off.
    A test that wants it sets TRIALS_GCS_EMULATOR=on for the sweep it starts."""
    monkeypatch.setenv("TRIALS_GCS_EMULATOR", "off")
