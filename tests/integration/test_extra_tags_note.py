"""A metric reported beside the spec's: a trials.main trainer's extra scalars are its design (no note); a plain
hypertune trainer's get one note (kept, not tuned)."""

from __future__ import annotations

import sys

import pytest

from trials.cli import main

pytestmark = pytest.mark.integration

SPEC = "metrics: {accuracy: maximize}\nparameters:\n  lr: {type: double, min: 0.1, max: 1}\nmax_trial_count: 1\n"
RUNTIME = """\
import dataclasses
import trials

@dataclasses.dataclass(frozen=True)
class Config:
    lr: float = 0.5

def objective(config, ctx):
    for step in ctx.steps(2):
        ctx.report(step, accuracy=0.5 + step / 10, loss=1.0 / step)

if __name__ == "__main__":
    trials.main(objective, Config)
"""
PLAIN = """\
import hypertune
ht = hypertune.HyperTune()
for step in (1, 2):
    ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="accuracy", metric_value=0.5, global_step=step)
    ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="loss", metric_value=0.5, global_step=step)
"""


@pytest.mark.parametrize(("trainer", "noted"), [(RUNTIME, False), (PLAIN, True)])
def test_extra_metrics_are_noted_only_for_a_plain_trainer(tmp_path, monkeypatch, capsys, trainer, noted):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(SPEC)
    (tmp_path / "train.py").write_text(trainer)
    assert main(["sweep", "s.yaml", "--job-id", "x", "--", sys.executable, "train.py"]) == 0
    out = capsys.readouterr().out
    assert ("also reports loss, not in the spec" in out) is noted, out
