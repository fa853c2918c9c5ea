"""The warped GP sampler: Vizier's label warping, direction, infinities, and that the GP sees it."""

import math

import numpy as np
import optuna
import pytest

from trials.study import warped_gp
from trials.study.samplers import gp_available, make_sampler

# OSS Vizier 0.1.24: output_warpers.create_default_warper(infeasible_warp=False).warp(Y) on these labels
# (to maximise), computed with google-vizier installed.
Y = [3.0, -1.0, 250.0, 0.5, 0.5, 12.0, -7.0, 1e4]
VIZIER = [-0.13855954, -0.32148766, -0.1246201, -0.19714653, -0.19714653, -0.13805301, -0.5, 0.5]


def test_matches_vizier_default_warper():
    got = warped_gp.log_warp(warped_gp.half_rank(np.array(Y)))
    assert got == pytest.approx(VIZIER, abs=1e-7)
    assert warped_gp.warp(Y, maximize=True, log=True) == pytest.approx(VIZIER, abs=1e-7)
    assert warped_gp.warp(Y, maximize=True).tolist() == warped_gp.half_rank(np.array(Y)).tolist()


def test_keeps_order_and_direction():
    rng = np.random.default_rng(3)
    y = rng.standard_normal(40) ** 3 * 1e3
    for maximize in (True, False):
        for log in (False, True):
            w = warped_gp.warp(y, maximize=maximize, log=log)
            assert (np.argsort(w, kind="stable") == np.argsort(y, kind="stable")).all()
        best = np.argmax(y) if maximize else np.argmin(y)
        good = y >= np.median(y) if maximize else y <= np.median(y)
        assert (warped_gp.warp(y, maximize=maximize)[good] == y[good]).all()  # the good half as it was
        assert warped_gp.warp(y, maximize=maximize, log=True)[best] == pytest.approx(0.5 if maximize else -0.5)
    assert np.ptp(warped_gp.warp(y, maximize=False, log=True)) <= 1.0 + 1e-12


def test_heavy_tail_is_compressed():
    y = np.array([1.0, 2.0, 3.0, 4.0, 1e6])  # to minimise: one diverged trial
    w = warped_gp.warp(y, maximize=False)
    gaps = np.diff(np.sort(w))
    assert gaps[-1] < 5 * gaps[0]  # the outlier is no longer a million times further away
    assert warped_gp.warp(y, maximize=False)[:3].tolist() == [1.0, 2.0, 3.0]


def test_infinite_and_tiny_inputs():
    w = warped_gp.warp([1.0, math.inf, 2.0, 3.0], maximize=False)
    assert np.isfinite(w).all() and w[1] > max(w[0], w[2], w[3])
    assert warped_gp.warp([5.0], maximize=False).tolist() == [5.0]
    assert warped_gp.warp([2.0, 2.0, 2.0], maximize=True, log=True).tolist() == [0.5, 0.5, 0.5]
    assert warped_gp.warp([2.0, 2.0, 2.0], maximize=True).tolist() == [2.0, 2.0, 2.0]


@pytest.mark.skipif(not gp_available(), reason="the GP sampler needs scipy")
def test_sampler_fits_warped_values_and_leaves_the_study_alone(monkeypatch):
    seen = []
    from trials.study.npgp import NumpyGPSampler

    parent = NumpyGPSampler._sample_relative_impl

    def spy(self, study, completed, running, space):
        seen.append([t.values[0] for t in completed])
        return parent(self, study, completed, running, space)

    monkeypatch.setattr(NumpyGPSampler, "_sample_relative_impl", spy)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=make_sampler("gp-warped", seed=0, n_startup=4))
    values = []
    for _ in range(6):
        trial = study.ask()
        x = trial.suggest_float("x", -5, 10)
        y = trial.suggest_float("y", -5, 10)
        values.append((1 - x) ** 2 + 100 * (y - x * x) ** 2)
        study.tell(trial, values[-1])
    assert [t.value for t in study.trials] == values  # the study keeps the real values
    assert len(seen) == 2 and seen[-1] != values[:5]
    assert seen[-1] == pytest.approx(warped_gp.warp(values[:5], maximize=False).tolist())
    assert sorted(seen[-1])[:3] == sorted(values[:5])[:3]  # the better half as it was, the rest warped
