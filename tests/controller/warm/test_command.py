"""Which commands start warm, which launcher a trial needs, what a survey may name (pure)."""

from __future__ import annotations

import os
import sys

from trials.controller.warm import command

ENV = {"PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin"}


def test_python_script_and_module_on_the_launchers_interpreter_start_warm():
    form = command.warm_form([sys.executable, "train.py", "--lr=0.1"], env=ENV, cwd="/w", interpreter=sys.executable)
    assert form == command.WarmCommand(python=sys.executable, kind="script", target="/w/train.py",
                                       args=("--lr=0.1",))
    form = command.warm_form(["python", "-m", "pkg.train", "--x=1"], env=ENV, cwd="/w", interpreter=sys.executable)
    assert isinstance(form, command.WarmCommand) and (form.kind, form.target, form.args) == ("module", "pkg.train",
                                                                                             ("--x=1",))


def test_anything_else_says_why_it_runs_fresh():
    for argv in (["bash", "-c", "python x.py"], [sys.executable, "-u", "x.py"], [sys.executable],
                 [sys.executable, "-m"], ["no-such-program-xyz", "x.py"]):
        why = command.warm_form(argv, env=ENV, cwd="/w", interpreter=sys.executable)
        assert isinstance(why, str) and why


def test_per_trial_variables_do_not_pick_another_launcher():
    one = {"OMP_NUM_THREADS": "1", "CLOUD_ML_TRIAL_ID": "1", "AIP_MODEL_DIR": "/a/1", "TF_CONFIG": "{}",
           "TRIALS_ATTEMPT": "0", "CUDA_VISIBLE_DEVICES": "0"}
    two = {"OMP_NUM_THREADS": "1", "CLOUD_ML_TRIAL_ID": "2", "AIP_MODEL_DIR": "/a/2", "TF_CONFIG": "{\"x\": 1}",
           "TRIALS_ATTEMPT": "1", "CUDA_VISIBLE_DEVICES": "1"}
    assert command.startup_key(one) == command.startup_key(two)
    for name, value in (("OMP_NUM_THREADS", "2"), ("PYTHONHASHSEED", "0"), ("MKL_NUM_THREADS", "1"),
                        ("XLA_FLAGS", "x"), ("LD_PRELOAD", "x"), ("TF_NUM_INTEROP_THREADS", "1")):
        assert command.startup_key({**one, name: value}) != command.startup_key(one), name
    assert command.launcher_env(one) == {"OMP_NUM_THREADS": "1"}


def test_a_survey_names_modules_only_and_never_jax():
    names = command.preload_names(["numpy", "jax", "jax.numpy", "jaxlib", "os; rm", 3, "torch.nn", "numpy",
                                   "trials.controller.warm.child", "../x"])
    assert names == ["numpy", "torch.nn"]
    assert command.preload_names({"not": "a list"}) == []
