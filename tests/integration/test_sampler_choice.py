"""`trials sweep --sampler`: a local choice of Optuna sampler for ALGORITHM_UNSPECIFIED, kept on resume."""

import json
import os
import subprocess
import sys

import pytest

from trials.study import choice, samplers

SPEC = """\
studySpec:
  metrics:
  - metricId: loss
    goal: MINIMIZE
  parameters:
  - parameterId: x
    doubleValueSpec: {minValue: -5, maxValue: 10}
maxTrialCount: 2
parallelTrialCount: 1
"""
TRAIN = """\
import argparse, hypertune
p = argparse.ArgumentParser(); p.add_argument("--x", type=float); a = p.parse_args()
hypertune.HyperTune().report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag="loss", metric_value=(a.x - 1) ** 2, global_step=1)
"""


def trials_cli(*argv, cwd):
    return subprocess.run([sys.executable, "-m", "trials", *argv], capture_output=True, text=True, cwd=cwd)


@pytest.fixture
def job_files(tmp_path):
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


@pytest.mark.parametrize(("argv", "message"), [
    (["--sampler", "nope"],
     "trials: error: --sampler: expected one of gp-warped, gp, tpe, cmaes, random, vizier, got 'nope'"),
    (["--sampler", "tpe", "--algorithm", "RANDOM_SEARCH"],
     "trials: error: --sampler tpe: only for algorithm ALGORITHM_UNSPECIFIED, the spec's is RANDOM_SEARCH"),
])
def test_a_bad_choice_is_one_line_and_leaves_nothing(job_files, argv, message):
    out = trials_cli("sweep", "spec.yaml", *argv, "--", sys.executable, "train.py", cwd=job_files)
    assert (out.returncode, out.stdout, out.stderr) == (2, "", message + "\n")
    assert not (job_files / "trials-jobs").exists()


def test_a_missing_package_names_the_extra(job_files, monkeypatch):
    monkeypatch.setattr(choice, "gp_available", lambda name="gp-warped": False)  # (where the choice is made)
    from trials.errors import ConfigError
    from trials.spec.load import load_spec

    study = load_spec(str(job_files / "spec.yaml")).study
    expected = r"--sampler gp-warped: needs scipy, which is not installed: pip install 'trials\[gp\]'$"
    with pytest.raises(ConfigError, match=expected):
        samplers.check_choice("gp-warped", study)
    assert samplers.check_choice("tpe", study) == "tpe"


def test_vizier_needs_its_extra_one_metric_and_a_flat_space(job_files, monkeypatch):
    from trials.errors import ConfigError
    from trials.spec.load import load_spec
    from trials.study import vizier

    monkeypatch.setattr(vizier, "available", lambda: False)
    study = load_spec(str(job_files / "spec.yaml")).study
    missing = r"^--sampler vizier: needs google-vizier and jax.*pip install 'trials\[vizier\]'$"
    with pytest.raises(ConfigError, match=missing):
        samplers.check_choice("vizier", study)
    monkeypatch.setattr(vizier, "available", lambda: True)
    assert samplers.check_choice("vizier", study) == "vizier"
    two = SPEC.replace("    goal: MINIMIZE\n", "    goal: MINIMIZE\n  - metricId: acc\n    goal: MAXIMIZE\n")
    (job_files / "two.yaml").write_text(two)
    with pytest.raises(ConfigError, match=r"^--sampler vizier: expected one metric, got 2$"):
        samplers.check_choice("vizier", load_spec(str(job_files / "two.yaml")).study)
    (job_files / "cond.yaml").write_text(CONDITIONAL)
    with pytest.raises(ConfigError, match=r"^--sampler vizier: expected a flat search space .* under 'kind'$"):
        samplers.check_choice("vizier", load_spec(str(job_files / "cond.yaml")).study)


CONDITIONAL = """\
studySpec:
  metrics:
  - metricId: loss
    goal: MINIMIZE
  parameters:
  - parameterId: kind
    categoricalValueSpec: {values: [a, b]}
    conditionalParameterSpecs:
    - parentCategoricalValues: {values: [a]}
      parameterSpec:
        parameterId: x
        doubleValueSpec: {minValue: 0, maxValue: 1}
maxTrialCount: 2
"""


@pytest.mark.integration
def test_the_chosen_sampler_runs_and_is_kept_on_resume(job_files):
    out = trials_cli("sweep", "spec.yaml", "--sampler", "random", "--job-id", "j", "--seed", "1",
                     "--", sys.executable, "train.py", cwd=job_files)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("job j: 2 trials, 1 in parallel, sampler random; folder ")
    out = trials_cli("resume", "j", "--max-trial-count", "3", cwd=job_files)
    assert out.returncode == 0, out.stderr
    assert ", sampler random; folder " in out.stdout.splitlines()[1]  # after "job j: added 1 trials"
    assert "3 succeeded" in out.stdout


@pytest.mark.integration
@pytest.mark.skipif(not samplers.gp_available(), reason="the default's GP needs scipy (trials[gp])")
def test_the_default_warped_gp_suggests_in_a_real_job(job_files):
    """ALGORITHM_UNSPECIFIED with scipy: trials 7-12 come from the warped GP (half the job's 12 random first),
    and the job's end says so."""
    spec = (job_files / "spec.yaml").read_text().replace("maxTrialCount: 2", "maxTrialCount: 12")
    (job_files / "spec.yaml").write_text(spec)
    out = trials_cli("sweep", "spec.yaml", "--job-id", "g", "--seed", "3", "--", sys.executable, "train.py",
                     cwd=job_files)
    assert out.returncode == 0, out.stderr
    assert ", sampler gp-warped; folder " in out.stdout and "12 succeeded" in out.stdout
    from trials.controller.jobs.registry import open_job

    h = open_job("g", root=str(job_files / "trials-jobs"), storage=None)
    by_gp = [t.number for t in h.store.frozen_trials() if any(k.startswith("gp:relative_params")
                                                              for k in t.system_attrs)]
    assert by_gp == [6, 7, 8, 9, 10, 11]
    assert "suggestions: 6 from the gp-warped model, 6 random (its start-up or a fallback)" in out.stdout


@pytest.mark.integration
@pytest.mark.skipif(not __import__("trials.study.vizier", fromlist=["available"]).available(),
                    reason="OSS Vizier needs google-vizier and jax (trials[vizier])")
@pytest.mark.long
def test_vizier_suggests_in_a_real_job(job_files):
    """Trial 2 comes from OSS Vizier's designer: the same history and seed give the same parameters.
    (One designed suggestion: each costs a JAX compilation, 15-20 s alone and a minute in the loaded suite.)"""
    out = trials_cli("sweep", "spec.yaml", "--sampler", "vizier", "--job-id", "v", "--seed", "5",
                     "--", sys.executable, "train.py", cwd=job_files)
    assert out.returncode == 0, out.stderr
    assert ", sampler vizier; folder " in out.stdout and "2 succeeded" in out.stdout
    from optuna.study import StudyDirection

    from trials.controller.jobs.registry import open_job
    from trials.study import vizier

    trials = open_job("v", root=str(job_files / "trials-jobs"), storage=None).store.frozen_trials()
    assert not any(vizier.ERROR_ATTR in t.system_attrs for t in trials)
    space = trials[1].distributions
    reqs = [vizier.request(space, StudyDirection.MINIMIZE, trials[:1], [], seed=5 + 1)]
    # Asked again in a fresh process (its JAX compilation is most of its 15-20 s), with the environment
    # suggest_in_child gives its child.
    again = subprocess.run(
        [sys.executable, "-c", "import json, sys\nfrom trials.study import vizier\n"
         "print(json.dumps([vizier.child_suggest(r) for r in json.load(sys.stdin)]))"],
        input=json.dumps(reqs), capture_output=True, text=True, timeout=vizier.TIMEOUT_S, check=False,
        env={**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "JAX_PLATFORMS": "cpu", "PYTHONSAFEPATH": "1"})
    assert again.returncode == 0, again.stderr[-2000:]
    suggested = json.loads(again.stdout.strip().splitlines()[-1])
    for i, params in zip((1,), suggested, strict=True):
        assert params["x"] == pytest.approx(trials[i].params["x"], abs=1e-12)
