"""Checkpoints of what ML code holds: JSON data, numpy arrays, PyTorch state dicts, any picklable object.

Chosen by the state (``auto``) or by name in ``trials.main``, ``trials-run`` OPTIONS and ``trials.tune``;
a restarted trial reads back whatever format the previous attempt wrote.
"""

import os
import subprocess
import sys

import pytest

import trials
from trials.errors import CheckpointError, ConfigError
from trials.runtime.checkpoint import CheckpointStore
from trials.runtime.context import RunOptions
from trials.runtime.formats import FORMATS, choose_format, resolve_format

np = pytest.importorskip("numpy")
SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")


def test_auto_chooses_by_the_state(tmp_path):
    from sklearn.linear_model import SGDClassifier

    store = CheckpointStore(str(tmp_path), keep=10)
    names = {}
    states = {1: {"w": [1.0, 2.0], "epoch": 1}, 2: np.arange(3.0), 3: {"w1": np.ones((2, 2))},
              4: {"w": (1, 2)}, 5: SGDClassifier(alpha=0.5), 6: {"arrays": {"w": np.ones(2)}, "epoch": 6}}
    for step, state in states.items():
        names[step] = os.path.basename(store.save(state, step))
    assert [n.rsplit(".", 1)[1] for n in names.values()] == ["json", "npz", "npz", "pkl", "pkl", "pkl"]
    assert store.load(1) == states[1]
    assert np.array_equal(store.load(2), states[2])
    assert np.array_equal(store.load(3)["w1"], states[3]["w1"])
    assert store.load(4) == {"w": (1, 2)}  # a tuple stays a tuple: not forced through JSON
    assert store.load(5).alpha == 0.5


def test_torch_state_dict_round_trips(tmp_path):
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 4}
    assert choose_format(state).name == "torch"
    store = CheckpointStore(str(tmp_path))
    assert store.save(state, 4).endswith("ckpt-00000004.pt")
    step, back = CheckpointStore(str(tmp_path), fmt="torch").load_latest()
    restored = torch.nn.Linear(3, 2)
    restored.load_state_dict(back["model"])
    assert step == 4 and back["epoch"] == 4 and torch.equal(restored.weight, model.weight)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_each_format_by_name(tmp_path, name):
    if name == "torch":
        pytest.importorskip("torch")
    state = {"w": np.arange(4.0)} if name in ("npz", "torch", "pickle") else {"w": [0.0, 1.0]}
    store = CheckpointStore(str(tmp_path), fmt=name)
    path = store.save(state, 2)
    assert path.endswith(FORMATS[name].suffix)
    assert np.array_equal(np.asarray(CheckpointStore(str(tmp_path)).load_latest()[1]["w"]),
                          np.asarray(state["w"]))


def test_a_step_rewritten_in_another_format_keeps_one_file(tmp_path):
    store = CheckpointStore(str(tmp_path))
    store.save({"w": 1}, 3)
    store.save({"w": (1,)}, 3)  # now pickle
    assert sorted(os.listdir(tmp_path)) == ["ckpt-00000003.pkl"]
    assert store.load_latest() == (3, {"w": (1,)})


def test_unknown_format_names_the_formats():
    with pytest.raises(ConfigError, match="'pickle'.*got 'pkl'"):
        resolve_format("pkl")
    with pytest.raises(ConfigError, match="'auto', 'json', 'npz', 'torch', 'pickle'.*got 'pkl'"):
        RunOptions(checkpoint_format="pkl")


def test_json_failure_says_which_formats_exist(tmp_path):
    from sklearn.linear_model import SGDClassifier

    store = CheckpointStore(str(tmp_path), fmt="json")
    with pytest.raises(CheckpointError, match=r"\(json\): TypeError: .*SGDClassifier.*'pickle' \(any picklable"):
        store.save(SGDClassifier(), 1)


def test_main_with_a_bad_format_is_exit_2_with_one_line(trial_env, capsys):
    code = trials.main(lambda ctx: 1.0, argv=[], checkpoint_format="pkl")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "checkpoint_format must be one of" in err


def test_sklearn_estimator_resumes_in_process(run_trial):
    sys.path.insert(0, SCRIPTS)
    try:
        import sklearn_trial
    finally:
        sys.path.remove(SCRIPTS)
    first = run_trial(sklearn_trial.objective, sklearn_trial.Config, flags={"epochs": 3}, stop_after_step=2)
    assert first.exit_code == 75 and first.checkpoint_steps() == [1, 2]
    assert sorted(os.listdir(first.checkpoint_dir)) == ["ckpt-00000001.pkl", "ckpt-00000002.pkl"]
    second = run_trial(sklearn_trial.objective, sklearn_trial.Config, flags={"epochs": 3}, attempt=1)
    assert second.exit_code == 0 and second.steps == [1, 2, 3]
    assert [m.step for m in second.measurements] == [3]


@pytest.mark.integration
def test_sklearn_trainer_restarts_from_its_pickle_in_a_new_process(tmp_path):
    """`python train.py` twice on the same checkpoint folder: the second run resumes the estimator."""
    env = {**os.environ, "AIP_CHECKPOINT_DIR": str(tmp_path / "ckpt"), "TRIALS_TRIAL_DIR": str(tmp_path / "trial"),
           "CLOUD_ML_HP_METRIC_FILE": str(tmp_path / "trial" / "hypertune.metrics")}
    script = os.path.join(SCRIPTS, "sklearn_trial.py")
    first = subprocess.run([sys.executable, script, "--epochs=2"], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["ckpt-00000001.pkl", "ckpt-00000002.pkl"]
    second = subprocess.run([sys.executable, script, "--epochs=4"], env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    assert "resumed at 2 after 401 updates" in second.stdout  # 2 epochs x 200 samples
    assert sorted(os.listdir(tmp_path / "ckpt")) == [f"ckpt-0000000{s}.pkl" for s in (2, 3, 4)]


@pytest.mark.integration
@pytest.mark.parametrize(("options", "code", "expected"), [
    ('{"checkpoint_format": "pickle"}', 0, ["ckpt-00000001.pkl", "ckpt-00000002.pkl"]),
    ('{"checkpoint_format": "pkl"}', 2, "trials-run: error: objective_mod.OPTIONS: checkpoint_format must be"),
])
def test_trials_run_options_choose_the_format(tmp_path, options, code, expected):
    (tmp_path / "objective_mod.py").write_text(
        f"OPTIONS = {options}\n"
        "def objective(ctx):\n"
        "    for step in ctx.steps(2):\n"
        "        ctx.report(step, loss=1.0 / step)\n"
        "        ctx.checkpoint({'w': [step]}, step)\n")
    env = {**os.environ, "AIP_CHECKPOINT_DIR": str(tmp_path / "ckpt"), "TRIALS_TRIAL_DIR": str(tmp_path / "t"),
           "CLOUD_ML_HP_METRIC_FILE": str(tmp_path / "t" / "hypertune.metrics")}
    out = subprocess.run([sys.executable, "-m", "trials.runtime.entrypoint", str(tmp_path / "objective_mod.py")],
                         env=env, capture_output=True, text=True)
    assert out.returncode == code, out.stderr
    if code == 0:
        assert sorted(os.listdir(tmp_path / "ckpt")) == expected
    else:
        assert out.stderr.count("\n") == 1 and out.stderr.startswith(expected)


def test_tune_takes_a_checkpoint_format(tmp_path):
    seen = []

    def objective(ctx):
        for step in ctx.steps(2):
            ctx.report(step, loss=ctx.config.x * step)
            seen.append(os.path.basename(ctx.checkpoint({"x": ctx.config.x}, step)))

    spec = tmp_path / "spec.yaml"
    spec.write_text("metrics: {loss: minimize}\nparameters:\n  x: {type: double, min: 0, max: 1}\n"
                    "max_trial_count: 2\n")
    result = trials.tune(objective, str(spec), max_trial_count=2, checkpoint_format="pickle",
                         directory=str(tmp_path / "job"))
    assert result.state == "JOB_STATE_SUCCEEDED" and seen and all(n.endswith(".pkl") for n in seen)
