"""A journal job that has already ended SUCCEEDED with every trial ended, recognised without Optuna:
what ``trials resume`` needs to know that its job loop could only find nothing to run.

This is not the loop's end rule: it decides nothing about a job. It recognises one that the loop
itself already ended (``JOB_STATE_SUCCEEDED``, written by ``LoopState.finish_job`` after its failure
rules had judged the trials it has) and that nothing has touched since: every trial finished in
Optuna's storage and SUCCEEDED or INFEASIBLE, none waiting (never started, or requeued) or running.
Whatever else could make the slow path do or say something more answers "not this one", and the
caller runs the slow path, which stays the one source of truth: see :func:`read_ended`.
"""

from __future__ import annotations

from trials.controller.backend import registry
from trials.controller.jobs import view
from trials.controller.jobs.lock import lock_holder
from trials.controller.policy import study_stopping
from trials.controller.trial.devices import accelerator_counts
from trials.controller.trial.view import check_command
from trials.records import JobState, TrialState

ENDED_TRIAL_STATES = (TrialState.SUCCEEDED, TrialState.INFEASIBLE)


def read_ended(job_id: str, *, root: str, storage: str | None) -> view.JobView | None:
    """The job, read without Optuna and without writing anything, when ``trials resume`` of it
    (without options that change it: the caller checks those) could only find nothing to run and
    print its summary; else None (then nothing is known: run the slow path).

    It is the job only when all of these hold:

    - a journal job (not a database), read exactly (``view.read_exact``: its snapshot current,
      or none at all, no torn or new record at the journal's end, no journal writer's lock file);
    - its stored state is ``JOB_STATE_SUCCEEDED``;
    - every trial is finished in the storage and SUCCEEDED or INFEASIBLE (none waiting, requeued,
      running or stopping);
    - no controller holds the job folder's lock;
    - the slow path's start-up would say or refuse nothing more: the job runs on the host (no
      Slurm or container runtime, whose checks run first), its pools ask for no accelerator (the
      GPU check), it has a command to run, no chaos rate (its summary's chaos line) and no
      ``studyStoppingConfig`` (the loop asks its rules again before it looks for a trial).

    Any error reading or checking the job is a None as well: the slow path reads the job again and
    says what is wrong.
    """
    try:
        return _ended(job_id, root=root, storage=storage)
    except Exception:  # noqa: BLE001 - any doubt: the slow path, the one source of truth, answers
        return None


def _ended(job_id: str, *, root: str, storage: str | None) -> view.JobView | None:
    h = view.read_exact(job_id, root=root, storage=storage)
    if h is None:
        return None
    meta = h.store.meta()
    if meta.state != JobState.SUCCEEDED:
        return None
    runtime = registry.RUNTIMES.get(meta.runtime or registry.HOST)
    if runtime is None or not runtime.plain or meta.images or any(
            meta.options_of(name) for name, entry in registry.RUNTIMES.items() if entry.option_flags):
        return None
    if any(accelerator_counts(h.job)) or h.job.local.inject_restarts or study_stopping.from_job(h.job) is not None:
        return None
    check_command(h.job, meta.local_command, f"job {job_id}")  # (raises: the slow path refuses it)
    if not all(t.state.is_finished() and t.user_attrs.get("state") in ENDED_TRIAL_STATES
               for t in h.store.frozen_trials()):
        return None
    if lock_holder(h.job_dir) is not None:
        return None  # a controller runs it (or is ending it): the slow path says so
    return h
