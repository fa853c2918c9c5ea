"""The unchanged argparse + hypertune trainer, tested as Vertex will run it (trials' pytest plugin).

``ScriptContract`` checks what Vertex requires (every tuning flag accepted, the spec's metric reported, the model
under AIP_MODEL_DIR) and what it recommends (resume after a restart, SIGTERM handled); the ``run_script`` fixture
runs the trainer with a trial's flags and environment and returns what it reported and wrote.
"""

import os

from trials.testing import ScriptContract

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class TestTrainer(ScriptContract):
    script = "train.py"
    spec = os.path.join(HERE, "config.yaml")
    args = ["--epochs=4", "--n_samples=200000"]  # epochs long enough for SIGTERM to land mid-run
    cwd = HERE


def test_the_loss_goes_down(run_script):
    run = run_script("train.py", {"learning_rate": 0.3, "l2": 1e-4, "batch_size": 64}, args=["--epochs=4"], cwd=HERE)
    assert run.exit_code == 0, run.stderr
    losses = run.values("val_loss")
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert run.model_files() and run.checkpoint_files()
