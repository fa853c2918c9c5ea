"""`trials.tune` with a PostgreSQL storage: the trials it returns are as recorded (the loop's events of a
batched pass reach it after the batch's commit; before, it read each trial RUNNING and raised "no trial
succeeded" although all had)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import trials
from trials.spec.load import parse_spec


@dataclasses.dataclass
class Config:
    x: float = 0.5


def objective(config: Config, ctx: trials.TrialContext) -> None:
    for step in (1, 2):
        ctx.report(step, score=config.x * step)


def test_tune_on_postgres_returns_its_succeeded_trials(pg_url, job_id, tmp_path: Path) -> None:
    spec = parse_spec({"studySpec": {"metrics": [{"metricId": "score", "goal": "MAXIMIZE"}],
                                     "parameters": [{"parameterId": "x",
                                                     "doubleValueSpec": {"minValue": 0, "maxValue": 1}}]},
                       "maxTrialCount": 3}, source="t")
    result = trials.tune(objective, spec, Config, storage=pg_url, directory=str(tmp_path), seed=1, job_id=job_id)
    assert [t["state"] for t in result.trials] == ["SUCCEEDED"] * 3
    assert all([m["stepCount"] for m in t["measurements"]] == ["1", "2"] for t in result.trials)
    best = max(result.trials, key=lambda t: t["finalMeasurement"]["metrics"][0]["value"])
    assert result.best is not None and result.best["id"] == best["id"]
