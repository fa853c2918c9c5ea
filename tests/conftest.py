"""Suite-wide settings."""

import pytest


@pytest.fixture(autouse=True)
def _no_cloud_storage_endpoint(monkeypatch):
    """The gcs extra is installed for its tests; elsewhere its endpoint (about 0.5 s per sweep) stays off.
    A test that wants it sets TRIALS_GCS_EMULATOR=on for the sweep it starts."""
    monkeypatch.setenv("TRIALS_GCS_EMULATOR", "off")
