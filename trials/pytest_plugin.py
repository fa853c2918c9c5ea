"""pytest plugin (the ``pytest11`` entry point): the fixtures ``trial_env``, ``run_trial`` and ``run_script``.

Invisible to a project that does not use it: loading it imports nothing but this module (and the ``trials``
package, which loads nothing), changes nothing outside trials, and its fixtures import their code
(:mod:`trials.testing`) when a test first asks for one. ``ObjectiveContract``, ``TrialSandbox``, ``TrialRun``,
``run_objective``, ``sample_flag_sets`` and ``sample_trial_flags`` are :mod:`trials.testing`'s, also importable
from here, as before.

Example:
    >>> def test_reports_accuracy(run_trial):  # doctest: +SKIP
    ...     result = run_trial(objective, Config, flags={"learning_rate": 0.1, "epochs": 3})
    ...     assert result.exit_code == 0
    ...     assert result.steps == [1, 2, 3]
    ...     assert result.metric("accuracy")[-1] > 0.5
"""

from __future__ import annotations

import pytest

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable
    from typing import Any

    from trials.testing import ScriptRun, TrialRun, TrialSandbox

_FROM_TESTING = frozenset({"ObjectiveContract", "TrialSandbox", "TrialRun", "run_objective", "sample_flag_sets",
                           "sample_trial_flags", "TRIAL_ID", "JOB_ID", "PROJECT_NUMBER", "ScriptContract",
                           "ScriptRun", "run_script"})


@pytest.fixture
def trial_env(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> TrialSandbox:
    """All ``AIP_*``/``CLOUD_ML_*``/``TRIALS_*`` variables sandboxed into ``tmp_path``
    (:class:`trials.testing.TrialSandbox`)."""
    from trials.testing import TrialSandbox

    return TrialSandbox(str(tmp_path / "trial-env"), monkeypatch)


@pytest.fixture
def run_trial(trial_env: TrialSandbox) -> Callable[..., TrialRun]:
    """``run_trial(objective, Config=None, *, spec=None, flags=(), stop_after_step=None,
    sigterm_after_step=None, attempt=None, **run_options) -> TrialRun``, in-process.

    ``flags`` is a list of tokens or a mapping (formatted as the controller would). Call it again
    with ``attempt=1`` to restart the same trial (same directories, fresh hypertune file).
    ``run_options`` are :class:`trials.runtime.context.RunOptions`; TensorBoard output is off unless
    ``tensorboard=True``.
    """
    from trials.testing import run_objective

    def _run(objective: Callable[..., Any], Config: type | None = None, **kwargs: Any) -> TrialRun:
        return run_objective(trial_env, objective, Config, **kwargs)

    return _run


@pytest.fixture
def run_script(trial_env: TrialSandbox) -> Callable[..., ScriptRun]:
    """``run_script(target, flags=(), *, args=(), module=False, subprocess_run=False, attempt=None, cwd=None,
    timeout_s=300, sigterm_after_reports=None) -> ScriptRun``: an unchanged argparse + hypertune trainer (a script's
    path, or a module with ``module=True``) run as a trial in ``trial_env`` (:func:`trials.testing.run_script`).
    """
    from trials.testing import run_script as run

    def _run(target: str, flags: Any = (), **kwargs: Any) -> ScriptRun:
        return run(trial_env, target, flags, **kwargs)

    return _run


def __getattr__(name: str) -> Any:
    """The names of :mod:`trials.testing`, where users imported them before (``from trials.pytest_plugin import
    ObjectiveContract``); not listed by ``dir()``, so pytest's scan of the plugin imports nothing."""
    if name not in _FROM_TESTING:
        raise AttributeError(f"module 'trials.pytest_plugin' has no attribute {name!r}")
    import trials.testing

    return getattr(trials.testing, name)
