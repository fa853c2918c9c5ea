"""The contract suite of an unchanged trainer (argparse + hypertune, as Vertex users write them): subclass
:class:`ScriptContract` in a test module.

Its failures are what Vertex requires of a trial: the tuning flags are accepted, the spec's metric is reported
through hypertune, the exit is 0, and (where asked) the model lands under ``AIP_MODEL_DIR``. Resuming after a restart
and handling SIGTERM are recommendations, not requirements: a trainer that writes no checkpoint is told how a restart
would go (a skip with the reason and the fix), and fails only when it checkpoints and still starts over; a trainer
that a SIGTERM kills by the signal's default action is told so ("did not handle SIGTERM: killed, nothing saved").
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from trials import protocol
from trials.testing.contract import sample_trial_flags
from trials.testing.sandbox import TrialSandbox
from trials.testing.script import ScriptRun, run_script


class ScriptContract:
    """Checks an unchanged trainer keeps Vertex's trial contract. Subclass it in a test module.

    Set ``script`` (a path, relative to ``cwd``) or ``module`` (``python -m module``), ``spec`` (the gcloud
    ``config.yaml`` or a search space: its parameters become flags, its first metric is ``metric`` unless set),
    ``args`` that keep a run short (e.g. ``["--epochs=2"]``), and ``cwd`` (default: the folder pytest runs in).
    ``in_process = False`` runs every check as a subprocess (slower; the SIGTERM check always is one).

    Example:
        >>> class TestTask(ScriptContract):  # doctest: +SKIP
        ...     script = "trainer/task.py"
        ...     spec = "config.yaml"
        ...     args = ["--epochs=2"]
    """

    script: str | None = None
    module: str | None = None
    spec: Any = None
    metric: str = ""
    args: Sequence[str] = ()
    flags: Sequence[str] | Mapping[str, Any] = {}  # fixed parameter values (else drawn from the spec)
    cwd: str | None = None
    in_process: bool = True
    expects_model: bool = True
    timeout_s: float = 300.0

    # -- helpers
    def _study(self) -> Any:
        if self.spec is None:
            pytest.fail(f"{type(self).__name__} must set `spec` (the job's config.yaml or a search space)",
                        pytrace=False)
        if isinstance(self.spec, (str, os.PathLike)):
            from trials.spec.load import load_spec

            path = os.fspath(self.spec)  # relative to cwd, as `script` is
            return load_spec(os.path.join(self.cwd, path) if self.cwd else path).study
        return getattr(self.spec, "study", self.spec)

    def _metric(self) -> str:
        return self.metric or self._study().metric_ids[0]

    def _target(self) -> tuple[str, bool]:
        if (self.script is None) == (self.module is None):
            pytest.fail(f"{type(self).__name__} must set one of `script` or `module`", pytrace=False)
        return (self.script, False) if self.script is not None else (str(self.module), True)

    def _flags(self, seed: int = 0) -> list[str]:
        """A full trial's flags drawn from the spec, with ``flags``' fixed values in place of the drawn ones."""
        drawn = sample_trial_flags(self._study(), seed=seed)
        if not isinstance(self.flags, Mapping):  # tokens: they come last and win, as argparse keeps the last
            return [*drawn, *map(str, self.flags)]
        fixed = set(self.flags)
        return [t for t in drawn if t[2:].partition("=")[0] not in fixed] + [
            protocol.format_flag(name, value) for name, value in self.flags.items()]

    def _run(self, sandbox: TrialSandbox, *, subprocess_run: bool | None = None, **kwargs: Any) -> ScriptRun:
        target, module = self._target()
        child = (not self.in_process) if subprocess_run is None else subprocess_run
        return run_script(sandbox, target, self._flags(), args=self.args, module=module, subprocess_run=child,
                          cwd=self.cwd, timeout_s=self.timeout_s, **kwargs)

    def _ok(self, run: ScriptRun) -> ScriptRun:
        if run.exit_code != 0:
            tail = "\n".join((run.stderr or "").strip().splitlines()[-12:])
            pytest.fail(f"the trainer exited {run.exit_code} with flags {run.argv} (expected 0; on Vertex the "
                        f"trial fails):\n{tail}", pytrace=False)
        return run

    # -- what Vertex requires
    def test_every_tuning_flag_is_accepted(self, trial_env: TrialSandbox) -> None:
        """Each spec parameter's flag appears in the trainer's --help, and a full trial's flags run to exit 0."""
        target, module = self._target()
        shown = run_script(trial_env, target, args=["--help"], module=module, cwd=self.cwd,
                           subprocess_run=not self.in_process, timeout_s=self.timeout_s)
        names = [p.parameter_id for p in _all_parameters(self._study())]
        text = shown.stdout + shown.stderr
        missing = [n for n in names if not re.search(rf"--{re.escape(n)}\b|--{re.escape(n.replace('_', '-'))}\b",
                                                     text)]
        if shown.exit_code == 0 and missing:
            pytest.fail(f"the trainer's --help lists no flag for {', '.join(missing)} (the spec's parameters "
                        f"arrive as --NAME=VALUE; argparse exits 2 on a flag it does not know)", pytrace=False)
        self._ok(self._run(trial_env))

    def test_the_spec_metric_is_reported(self, trial_env: TrialSandbox) -> None:
        """The spec's metric reaches the hypertune file (the trial is INFEASIBLE on Vertex without it)."""
        metric = self._metric()
        run = self._ok(self._run(trial_env))
        if not run.values(metric):
            others = f"it reported {', '.join(run.tags)}" if run.tags else "it reported no metric at all"
            pytest.fail(f"the spec's metric {metric!r} never reached the hypertune file ({others}): call "
                        f"hypertune.HyperTune().report_hyperparameter_tuning_metric("
                        f"hyperparameter_metric_tag={metric!r}, metric_value=..., global_step=...)", pytrace=False)
        steps = run.steps(metric)
        assert steps == sorted(steps), f"{metric!r} steps went backwards: {steps}"

    def test_the_model_is_saved_under_aip_model_dir(self, trial_env: TrialSandbox) -> None:
        """Vertex keeps what is written under AIP_MODEL_DIR (gs://…/TRIAL/model/): the rest is lost."""
        if not self.expects_model:
            pytest.skip("expects_model = False")
        run = self._ok(self._run(trial_env))
        assert run.model_files(), (f"nothing was written under AIP_MODEL_DIR ({run.model_dir}): on Vertex the "
                                   f"trained model is kept only there (set expects_model = False if none is saved)")

    # -- recommended
    def test_a_restart_resumes_from_its_checkpoint(self, trial_env: TrialSandbox) -> None:
        """Recommended: after a restart (same folders, next attempt) the trainer continues from its checkpoint.
        A failure only when it writes checkpoints and still starts over."""
        metric = self._metric()
        first = self._run(trial_env, subprocess_run=True, sigterm_after_reports=1)
        if not first.checkpoint_files():
            pytest.skip("recommended: the trainer wrote nothing to AIP_CHECKPOINT_DIR, so a restart (a preempted VM, "
                        "a crash Vertex retries) starts over at step 1; save a checkpoint there each epoch and load "
                        "the latest at start-up (Vertex does not require it)")
        stopped_at = max(first.steps(metric), default=0)
        second = self._ok(self._run(trial_env, attempt=1))
        resumed = second.steps(metric)
        assert resumed and resumed[0] > 1 and resumed[0] >= stopped_at, (
            f"the trainer checkpoints ({', '.join(first.checkpoint_files()[:3])} in AIP_CHECKPOINT_DIR) but "
            f"started over after a restart: reported steps {resumed} after stopping at step {stopped_at}")

    def test_sigterm_ends_it_cleanly(self, trial_env: TrialSandbox) -> None:
        """Recommended: on SIGTERM (Vertex's preemption notice) the trainer saves and exits in the grace period."""
        run = self._run(trial_env, subprocess_run=True, sigterm_after_reports=1)
        if run.signal == signal.SIGTERM:
            pytest.skip("recommended: did not handle SIGTERM: killed by it, nothing saved (Vertex sends SIGTERM "
                        "before it stops a VM: catch it, checkpoint, exit)")
        if run.signal == signal.SIGKILL:
            pytest.fail("the trainer ignored SIGTERM and was killed after the grace period", pytrace=False)
        if not run.values(self._metric()):
            pytest.skip("the trainer ended before its first report: nothing to interrupt")


def _all_parameters(study: Any) -> list[Any]:
    out: list[Any] = []

    def visit(p: Any) -> None:
        out.append(p)
        for cond in p.conditionals:
            visit(cond.parameter)

    for p in study.parameters:
        visit(p)
    return out
