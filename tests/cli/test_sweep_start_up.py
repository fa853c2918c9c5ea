"""What a journal sweep loads: nothing only a database job or a container needs (sqlalchemy alone
cost ~0.2-0.4 s of every sweep's start-up before its first trial)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

NOT_FOR_A_JOURNAL_SWEEP = ("sqlalchemy", "trials.study.database.leases", "trials.study.database.outages",
                           "trials.study.journal.check", "trials.controller.container.runtime")

TRAINER = """
import hypertune
hypertune.HyperTune().report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag="score", metric_value=1.0, global_step=1)
"""

SPEC = """\
metrics: {score: maximize}
parameters:
  x: {type: double, min: 0, max: 1}
max_trial_count: 2
"""


def test_a_journal_sweep_never_imports_the_database_layer_or_the_readers(tmp_path):
    (tmp_path / "train.py").write_text(TRAINER)
    (tmp_path / "spec.yaml").write_text(SPEC)
    program = textwrap.dedent(f"""
        import json, sys
        from trials.cli import main
        code = main(["sweep", "spec.yaml", "--root", "jobs", "--quiet", "--", sys.executable, "train.py"])
        print(json.dumps({{"code": code, "loaded": [m for m in {NOT_FOR_A_JOURNAL_SWEEP!r} if m in sys.modules]}}))
    """)
    done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"code": 0, "loaded": []}, done.stderr


def test_a_default_sampler_sweep_starts_its_suggestion_process_before_it_loads_optuna(tmp_path):
    (tmp_path / "train.py").write_text(TRAINER)
    (tmp_path / "spec.yaml").write_text(SPEC.replace("max_trial_count: 2", "max_trial_count: 11"))
    program = textwrap.dedent("""
        import json, sys
        from trials.cli import main
        from trials.study import choice
        seen, real = [], choice.warm
        def warm(name):
            seen.append([name, "optuna" in sys.modules])
            real(name)
        choice.warm = warm
        taken, real_take = [], choice.take
        choice.take = lambda name: taken.append(name) or real_take(name)
        code = main(["sweep", "spec.yaml", "--root", "jobs", "--quiet", "--", sys.executable, "train.py"])
        print(json.dumps({"code": code, "warmed": seen, "taken": taken, "left": choice._warm is not None}))
    """)
    done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"code": 0, "warmed": [["gp-warped", False]], "taken": ["gp-warped"], "left": False}, done.stderr


def test_which_sweeps_start_a_suggestion_process_ahead(monkeypatch):
    import importlib

    from trials.spec.load import loads_spec
    from trials.study import choice

    run = importlib.import_module("trials.cli.run")  # (trials.cli.run is also a function's name)
    warmed: list[str] = []
    monkeypatch.setattr(choice, "warm", warmed.append)
    monkeypatch.delenv("TRIALS_SUGGEST", raising=False)
    for trials, sampler in ((11, None), (10, None), (11, "tpe"), (11, "gp"), (2, "vizier"), (1, "vizier")):
        spec = SPEC.replace("max_trial_count: 2", f"max_trial_count: {trials}")
        run._warm_suggester(loads_spec(spec, source="s.yaml"), sampler)
    grid = SPEC.replace("x: {type: double, min: 0, max: 1}", "x: {type: discrete, values: [1, 2, 3]}")
    run._warm_suggester(loads_spec(grid + "algorithm: grid\n", source="s.yaml"), None)
    assert warmed == ["gp-warped", "gp", "vizier"]  # past the random start-up only; never TPE's or a grid's
    monkeypatch.setenv("TRIALS_SUGGEST", "inline")
    run._warm_suggester(loads_spec(SPEC.replace("max_trial_count: 2", "max_trial_count: 50"), source="s.yaml"), None)
    assert warmed == ["gp-warped", "gp", "vizier"]


def test_the_collector_pauses_for_the_start_up_runs_in_the_loop_and_is_given_back(tmp_path):
    (tmp_path / "train.py").write_text(TRAINER)
    (tmp_path / "spec.yaml").write_text(SPEC)
    program = textwrap.dedent("""
        import gc, json, sys
        from trials.cli import main
        from trials.controller.jobs import registry, run
        seen = {"creating": [], "loop": []}
        created, ran = registry.create_job, run.run_job
        def create_job(*a, **k):
            seen["creating"].append(gc.isenabled())
            return created(*a, **k)
        def run_job(*a, **k):
            seen["loop"].append([gc.isenabled(), gc.get_freeze_count() > 0])
            return ran(*a, **k)
        registry.create_job, run.run_job = create_job, run_job
        codes = [main(["sweep", "spec.yaml", "--root", "jobs", "--quiet", "--", sys.executable, "train.py"])]
        seen["after"], seen["after_frozen"] = gc.isenabled(), gc.get_freeze_count()
        codes.append(main(["sweep", "missing.yaml", "--root", "jobs"]))  # refused before any loop
        seen["after_refused"] = gc.isenabled()
        gc.disable()  # a caller's own choice is kept
        codes.append(main(["sweep", "spec.yaml", "--root", "jobs", "--job-id", "b", "--quiet", "--",
                           sys.executable, "train.py"]))
        seen["callers_choice"] = gc.isenabled()
        print(json.dumps({"codes": codes, **seen}))
    """)
    done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"codes": [0, 2, 0], "creating": [False, False], "loop": [[True, True], [False, False]],
                   "after": True, "after_frozen": 0, "after_refused": True, "callers_choice": False}, done.stderr


BLAS_TRAINER = """
import os, sys
import hypertune
if "OPENBLAS_NUM_THREADS" in os.environ:  # what the controller set for its own NumPy leaked here
    sys.exit(3)
hypertune.HyperTune().report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag="score", metric_value=1.0, global_step=1)
"""


@pytest.mark.parametrize("command", [True, False])
def test_a_job_commands_numpy_starts_no_blas_thread_pool_and_no_trial_inherits_the_setting(tmp_path, command):
    """The ``trials`` command's process (trials.startup.trials_command) starts NumPy with one BLAS thread; a program
    that calls ``trials.cli.main`` itself (a library use) keeps NumPy's own start: trials changes nothing there."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("OpenBLAS starts no thread pool on one CPU: nothing to tell apart")
    (tmp_path / "train.py").write_text(BLAS_TRAINER)
    (tmp_path / "spec.yaml").write_text(SPEC)
    program = textwrap.dedent(f"""
        import atexit, json, os, sys, threading
        import trials.cli, trials.startup
        def report():
            # native threads only: OpenBLAS's pool is none of Python's (the controller's own threads are)
            native = len(os.listdir("/proc/self/task")) - threading.active_count()
            print(json.dumps({{"numpy": "numpy" in sys.modules, "threads": 1 + native,
                              "set": "OPENBLAS_NUM_THREADS" in os.environ}}), flush=True)
        atexit.register(report)  # (trials.cli.run ends the process: atexit handlers run first)
        sys.argv = ["trials", "sweep", "spec.yaml", "--root", "jobs", "--quiet", "--", sys.executable, "train.py"]
        if {command!r}:
            trials.startup.trials_command()
        else:
            trials.cli.run()
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                                          "OMP_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    threads = got.pop("threads")
    assert got == {"numpy": True, "set": False}, done.stderr
    assert threads == 1 if command else threads > 1  # OpenBLAS's pool: a thread per further core
