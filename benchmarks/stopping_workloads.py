"""Learning curves of the early-stopping benchmark: five workloads, each a list of trials' full curves.

Every curve is ``[(step, value), ...]`` oriented larger-is-better (losses negated), for trials whose
parameters are drawn at random with the seed (one slot, the same trials for every rule compared):

- ``digits``: the numpy MLP of ``trainers/digits.py`` (validation accuracy, 20 epochs);
- ``gbdt``: ``examples/gbdt/train.py`` (validation MSE every 10 rounds; ``n_estimators`` 20-200, so
  trials end at different steps);
- ``noisy``: a regression loss near 14.44 whose differences between trials (0.05) are the size of
  the noise between epochs (sd 0.03), as in a noisy Keras run;
- ``slow_start``: sigmoid accuracy curves (30 epochs): every trial is flat for its first 3-9 epochs
  (a warm-up where the ranking is noise), the better ones take off a little later;
- ``single_report``: one report per trial at global_step=1000 (AI Platform's pattern);
- ``late_bloomer`` (a stress case, outside the goal): the better a trial ends, the later it takes
  off, up to half the budget: until then the best trial looks exactly like the worst.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import tempfile
from typing import Any

import numpy as np

Curve = list[tuple[float, float]]
WORKLOADS = ("digits", "gbdt", "noisy", "slow_start", "single_report", "late_bloomer")
GOAL_WORKLOADS = WORKLOADS[:5]  # the five; late_bloomer shows the limit of any curve-only rule


def digits_curves(seed: int, n_trials: int, epochs: int = 20) -> list[Curve]:
    from benchmarks.trainers import digits

    rng = np.random.default_rng(seed)
    out = []
    for number in range(n_trials):
        params = {"learning_rate": float(10 ** rng.uniform(-3, 0)), "hidden": int(rng.integers(16, 97)),
                  "batch_size": int(rng.choice([32, 64, 128, 256])), "weight_decay": float(10 ** rng.uniform(-6, -1)),
                  "momentum": float(rng.uniform(0, 0.95))}
        values = digits.train(params, epochs=epochs, seed=seed * 1000 + number)
        out.append([(float(e), float(v)) for e, v in enumerate(values, start=1)])
    return out


def _gbdt_module() -> Any:
    name = "trials_bench_gbdt_example"
    if name not in sys.modules:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        spec = importlib.util.spec_from_file_location(name, os.path.join(root, "examples", "gbdt", "train.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


class _Recorder:
    """The part of ``trials.TrialContext`` the gbdt objective uses, recording its reports."""

    should_stop = False

    def __init__(self, model_dir: str):
        self.model_dir = model_dir
        self.curve: Curve = []

    def restore(self) -> None:
        return None

    def report(self, step: int, **metrics: float) -> None:
        self.curve.append((float(step), -float(metrics["val_loss"])))

    def checkpoint(self, state: Any, step: int) -> None:
        pass


def gbdt_curves(seed: int, n_trials: int) -> list[Curve]:
    gbdt = _gbdt_module()
    rng = np.random.default_rng(seed)
    out = []
    with tempfile.TemporaryDirectory(prefix="bench-gbdt-") as model_dir:
        for number in range(n_trials):
            config = gbdt.Config(n_estimators=int(round(10 ** rng.uniform(math.log10(20), math.log10(200)))),
                                 max_depth=int(rng.integers(2, 7)),
                                 learning_rate=float(10 ** rng.uniform(-2, math.log10(0.3))),
                                 subsample=float(rng.uniform(0.5, 1.0)),
                                 min_samples_leaf=int(round(10 ** rng.uniform(0, math.log10(40)))), seed=number)
            ctx = _Recorder(model_dir)
            gbdt.objective(config, ctx)
            out.append(ctx.curve)
    return out


def noisy_curves(seed: int, n_trials: int, epochs: int = 20) -> list[Curve]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_trials):
        quality, speed = rng.uniform(0, 1), rng.uniform(2, 6)
        loss = [14.4 + 0.5 * math.exp(-t / speed) + 0.05 * (1 - quality) + rng.normal(0, 0.03)
                for t in range(epochs)]
        out.append([(float(t), -v) for t, v in enumerate(loss)])  # steps from 0, as Keras epochs
    return out


def _sigmoid_curves(seed: int, n_trials: int, epochs: int, takeoff_at: Any) -> list[Curve]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_trials):
        quality = rng.uniform(0, 1)
        ceiling, takeoff = 0.6 + 0.35 * quality, takeoff_at(quality, rng)
        out.append([(float(t), ceiling / (1 + math.exp(-(t - takeoff) / 2)) + rng.normal(0, 0.005))
                    for t in range(1, epochs + 1)])
    return out


def slow_start_curves(seed: int, n_trials: int, epochs: int = 30) -> list[Curve]:
    return _sigmoid_curves(seed, n_trials, epochs, lambda q, rng: 5 + 3 * q + rng.normal(0, 1.5))


def late_bloomer_curves(seed: int, n_trials: int, epochs: int = 30) -> list[Curve]:
    return _sigmoid_curves(seed, n_trials, epochs, lambda q, rng: 3 + 12 * q + rng.normal(0, 1))


def single_report_curves(seed: int, n_trials: int) -> list[Curve]:
    rng = np.random.default_rng(seed)
    return [[(1000.0, float(rng.uniform(0.5, 0.95)))] for _ in range(n_trials)]


def curves(workload: str, seed: int, n_trials: int) -> list[Curve]:
    return {"digits": digits_curves, "gbdt": gbdt_curves, "noisy": noisy_curves, "slow_start": slow_start_curves,
            "single_report": single_report_curves, "late_bloomer": late_bloomer_curves}[workload](seed, n_trials)
