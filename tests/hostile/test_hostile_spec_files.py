"""A spec path that is not a regular spec file: one line, exit 2, never a hang or a MemoryError."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _spec_path(tmp_path: Path, kind: str) -> tuple[str, str]:
    if kind == "fifo":
        path = tmp_path / "spec.yaml"
        os.mkfifo(path)
        return str(path), "got a FIFO"
    if kind == "huge":
        path = tmp_path / "huge.yaml"
        with open(path, "wb") as f:
            f.truncate(3 * 1024**3)  # sparse: 3 GB without the disk space
        return str(path), "at most 64 MiB, got 3221225472 bytes"
    return kind, "got a character device"


@pytest.mark.parametrize("command", ["validate", "sweep"])
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/urandom", "huge"])
def test_a_spec_path_that_is_no_regular_file_is_refused_at_once(tmp_path: Path, kind: str,
                                                                command: str) -> None:
    path, fragment = _spec_path(tmp_path, kind)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIALS_", "CLOUD_ML_"))}
    out = subprocess.run([sys.executable, "-m", "trials", command, path], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and path in lines[0], out.stderr
    assert "internal error" not in out.stderr
    assert not (tmp_path / "trials-jobs").exists()
