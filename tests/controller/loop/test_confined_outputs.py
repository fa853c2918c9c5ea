"""A job made through ``trials serve`` makes its trials' local output folders beneath the server's root, never
through a link (the real server and a planting trial: tests/hostile/test_hostile_serve_outputs.py)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from tests.controller.loop.backendkit import FakeBackend, FakeClock, Script
from trials.controller.jobs import registry
from trials.controller.jobs import run as job_run
from trials.controller.loop.launcher import TrialLauncher
from trials.controller.loop.record import active_attrs
from trials.spec.load import loads_spec

SPEC = """\
metrics: {loss: minimize}
parameters:
  x: {type: double, min: 0.0, max: 1.0}
command: [python, train.py]
max_trial_count: 3
"""


def _launcher(tmp_path: Path, base: Path, *, served: bool) -> tuple[TrialLauncher, registry.JobHandle]:
    root = tmp_path / "root"
    h = registry.create_job(loads_spec(SPEC, source="t.yaml"), root=str(root), job_id="j", spec_path=None,
                            storage=None, base_output_dir=str(base), project_number=None, local_command=None, seed=1)
    if served:  # what trials serve writes once a create passed its checks
        meta = h.store.meta()
        h.store.write_meta(replace(meta, api_parent="projects/p/locations/l", api_kind="customJobs"), since=meta)
    options = job_run.run_options(h, echo=False, grace_period_s=2.0, memory_limit_mb=None, inject_restarts=0.0,
                                  slots=None, seed=1)
    assert options.confine == (str(root) if served else None)
    clock = FakeClock()
    launcher = TrialLauncher(h.job, "j", options, backend=FakeBackend(clock, lambda t, a: Script()), clock=clock,
                             trial_job_rest={}, alloc=None)
    return launcher, h


def _prepare(launcher: TrialLauncher, h: registry.JobHandle) -> None:
    claimed = h.store.claim(h.job.study)
    assert claimed is not None
    h.store.set_trial_attrs(claimed.storage_id, **active_attrs(claimed, job_dir=h.job_dir, base_output=None,
                                                               worker="w", wall=0.0))
    launcher.prepare(claimed, 0.0, [])


def test_a_served_jobs_output_folders_are_made_beneath_the_root(tmp_path: Path) -> None:
    base = tmp_path / "root" / "out"
    launcher, h = _launcher(tmp_path, base, served=True)
    _prepare(launcher, h)
    assert sorted(os.listdir(base / "1")) == ["checkpoints", "logs", "model"]


def test_a_link_on_the_way_to_a_served_jobs_output_is_refused_and_nothing_is_made_where_it_points(
        tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "root").mkdir()
    os.symlink(victim, tmp_path / "root" / "out")  # planted by another job's trial after the create's check
    launcher, h = _launcher(tmp_path, tmp_path / "root" / "out", served=True)
    with pytest.raises(NotADirectoryError, match="refusing a symlink where a folder was expected"):
        _prepare(launcher, h)
    assert list(victim.iterdir()) == []


def test_a_served_jobs_output_outside_the_root_is_refused(tmp_path: Path) -> None:
    launcher, h = _launcher(tmp_path, tmp_path / "elsewhere", served=True)
    with pytest.raises(NotADirectoryError, match="outside the server's root"):
        _prepare(launcher, h)
    assert not (tmp_path / "elsewhere" / "1").exists()


def test_a_job_made_on_the_command_line_writes_its_outputs_where_its_user_said(tmp_path: Path) -> None:
    victim = tmp_path / "data"
    victim.mkdir()
    os.symlink(victim, tmp_path / "out")  # the user's own link: followed, as os.makedirs does
    launcher, h = _launcher(tmp_path, tmp_path / "out", served=False)
    _prepare(launcher, h)
    assert sorted(os.listdir(victim / "1")) == ["checkpoints", "logs", "model"]
