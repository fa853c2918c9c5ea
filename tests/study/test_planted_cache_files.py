"""A file beside the journal is input, not code: one planted there (a Slurm trainer can write the job
folder, a host trainer without the sandbox anything) runs nothing when a command opens the job.

Until issue 49 ``journal.log.optuna`` (Optuna's replay kept beside the journal) was opened with
``pickle.load``: a planted one ran its code in the next ``resume``, ``cancel`` or ``sweep``."""

from __future__ import annotations

import json
import os
import pickle

from benchmarks.read_scale import build_job
from trials.cli import main


class _Runs:
    """Unpickled, it creates ``marker``."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _plant(path: str, marker: str) -> None:
    with open(path, "wb") as f:
        pickle.dump(_Runs(marker), f)
        pickle.dump(_Runs(marker), f)


def test_planted_pickles_beside_the_journal_run_nothing(tmp_path, capsys):
    root = str(tmp_path / "jobs")
    build_job(root, "job", 12, n_running=0, n_waiting=0, requeued=False)
    journal = os.path.join(root, "job", "journal.log")
    markers = {}
    for suffix in (".optuna", ".snapshot", ".rest", ".cache"):
        markers[suffix] = str(tmp_path / f"ran{suffix}")
        _plant(journal + suffix, markers[suffix])
    for argv in (["describe", "job"], ["describe", "job", "--format", "json"], ["best", "job"], ["list"]):
        assert main([*argv, "--root", root]) == 0
    from trials.study.storage import open_storage

    open_storage("journal:" + journal)  # what resume, cancel and sweep open
    capsys.readouterr()
    assert [s for s, m in markers.items() if os.path.exists(m)] == []


def test_a_kept_part_that_claims_more_bytes_than_the_file_holds_is_as_none(tmp_path, capsys):
    """A part of bytes names its length: read as it claims, a planted 2**50 reserved it all before reading."""
    root = str(tmp_path / "jobs")
    build_job(root, "job", 12, n_running=0, n_waiting=0, requeued=False)
    journal = os.path.join(root, "job", "journal.log")
    assert main(["describe", "job", "--format", "json", "--root", root]) == 0
    first = json.loads(capsys.readouterr().out)["trials"]
    with open(journal + ".rest", "rb") as f:
        lines = f.read().split(b"\n")
    at = next(i for i, line in enumerate(lines) if line.startswith(b'{"bytes":'))
    lines[at] = b'{"bytes":1125899906842624}'
    with open(journal + ".rest", "wb") as f:
        f.write(b"\n".join(lines))
    assert main(["describe", "job", "--format", "json", "--root", root]) == 0
    assert json.loads(capsys.readouterr().out)["trials"] == first
