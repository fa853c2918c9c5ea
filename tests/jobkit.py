"""A finished job in a real journal storage, made without processes (for report/describe/CLI tests), and
the folder a test shares live with its sandboxed trials."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from trials.controller.jobs import registry
from trials.spec.load import loads_spec

SHARED_BUCKET = "test-signals"


def shared_folder(gcs_root: str | Path) -> Path:
    """A folder a test and its trials see alike, live: a bucket under the job's gcs root (``--gcs-root``).

    A sandboxed host trial sees the rest of the host copy-on-write, as a container sees its image: what it
    writes elsewhere (an events file in ``tmp_path``) never reaches the test, and what the test writes
    there after the trial started (a gate file) may never reach the trial. Only its trial folder, its
    ``AIP_*`` folders and the job's buckets are written through; the buckets are at the same host path
    in the trial (and at ``/gcs``), so give the job a gcs root of the test's own and pass the trainer
    paths in here. Unsandboxed (``TRIALS_SANDBOX=off``, Slurm nodes) it is a plain folder.
    """
    folder = Path(gcs_root) / SHARED_BUCKET
    folder.mkdir(parents=True, exist_ok=True)
    return folder


SINGLE = """
display_name: rep
metrics: {loss: minimize}
parameters:
  lr: {type: double, min: 0.001, max: 1.0, scale: log}
  width: {type: discrete, values: [8, 16, 32]}
max_trial_count: 6
parallel_trial_count: 1
"""


def fake_job(tmp_path, text=SINGLE, *, outcomes, storage=None):
    """A job in a real journal storage, finished without processes: one outcome per trial.

    outcome: ("ok", [values per step], stopped_early) | ("fail", reason) | None (never run), or
    ("fail", reason, [values per step before it failed], [exception line, traceback lines...]).
    """
    job = loads_spec(text, source="test.yaml")
    h = registry.create_job(job, root=str(tmp_path / "jobs"), job_id="rep", spec_path=None, storage=storage,
                              base_output_dir=None, project_number=None, local_command=["python", "x.py"],
                              seed=1)
    metric_ids = job.study.metric_ids
    for outcome in outcomes:
        if outcome is None:
            continue
        c = h.store.claim(job.study)
        attrs = {"state": "ACTIVE", "start_time": "2026-01-01T00:00:00.000000Z",
                 "end_time": "2026-01-01T00:00:01.000000Z"}
        if outcome[0] == "ok":
            curve, stopped = outcome[1], outcome[2]
            ms = [{"step": s + 1, "elapsed_s": 0.1 * s,
                   "metrics": {m: (v if i == 0 else v * 10) for i, m in enumerate(metric_ids)}}
                  for s, v in enumerate(curve)]
            for m in ms:
                h.store.report(c.storage_id, m["step"], m["metrics"][metric_ids[0]])
            attrs.update(state="SUCCEEDED", measurements=ms, final_measurement=ms[-1],
                         attempts=[{"replica": "workerpool0-0", "exitStatus": 0}])
            if stopped:
                attrs.update(stopped_early=True, stop_reason="below the median")
            h.store.set_trial_attrs(c.storage_id, **attrs)
            h.store.complete(c.number, [ms[-1]["metrics"][m] for m in metric_ids])
        else:
            attrs.update(state="INFEASIBLE", infeasible_reason=outcome[1], failed=True,
                         attempts=[{"replica": "workerpool0-0", "exitStatus": 1}])
            if len(outcome) > 2:  # it crashed after reporting steps, with an exception
                ms = [{"step": s + 1, "elapsed_s": 0.1 * s, "metrics": {metric_ids[0]: v}}
                      for s, v in enumerate(outcome[2])]
                attrs.update(measurements=ms, error_detail=list(outcome[3]))
            h.store.set_trial_attrs(c.storage_id, **attrs)
            h.store.fail(c.number)
    write_meta(h.store, state="JOB_STATE_SUCCEEDED")
    return registry.open_job("rep", root=str(tmp_path / "jobs"), storage=storage)


def write_meta(store: Any, **changes: Any) -> None:
    """Change fields of a job's record as trials does (``dataclasses.replace`` refuses a name that is no field)."""
    meta = store.meta()
    store.write_meta(replace(meta, **changes), since=meta)


def write_members(store: Any, **members: Any) -> None:
    """Write members of a job's record as they are, as an earlier trials (or an editor of the journal) did."""
    from trials.study import optuna_internals as internals
    from trials.study.names import meta_attr

    for name, value in members.items():
        store.storage.set_study_user_attr(internals.study_id(store.study), meta_attr(name), value)
