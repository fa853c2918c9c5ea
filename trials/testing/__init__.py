"""Testing trainers with pytest: a trial's sandboxed environment, trials run in-process, and contract suites.

- :class:`TrialSandbox` (the ``trial_env`` fixture): every ``AIP_*``/``CLOUD_ML_*``/``TRIALS_*`` variable pointed
  into the test's ``tmp_path``.
- A ``trials.main`` objective: :func:`run_objective` (the ``run_trial`` fixture) and :class:`ObjectiveContract`.
- An unchanged argparse + hypertune trainer, script or module: :func:`run_script` (the ``run_script`` fixture),
  its :class:`ScriptRun` (exit, the hypertune file's reports, the ``AIP_*`` outputs) and :class:`ScriptContract`.

The fixtures come from the pytest plugin (``trials.pytest_plugin``, registered when trials is installed), which
imports this package only when a test first uses one. pytest comes with ``pip install 'trials[pytest]'``.
"""

from trials.testing.contract import ObjectiveContract, sample_flag_sets, sample_trial_flags
from trials.testing.objective import TrialRun, run_objective
from trials.testing.sandbox import JOB_ID, PROJECT_NUMBER, TRIAL_ID, TrialSandbox
from trials.testing.script import HypertuneReport, ScriptRun, run_script
from trials.testing.script_contract import ScriptContract

__all__ = ["JOB_ID", "PROJECT_NUMBER", "TRIAL_ID", "HypertuneReport", "ObjectiveContract", "ScriptContract",
           "ScriptRun", "TrialRun", "TrialSandbox", "run_objective", "run_script", "sample_flag_sets",
           "sample_trial_flags"]
