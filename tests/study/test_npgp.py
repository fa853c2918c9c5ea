"""The NumPy GP (trials.study.npgp): its gradients against finite differences, its values against Optuna's torch
code where torch is installed, its quasi-random points, and the sampler without torch."""

import importlib.util
import math
import subprocess
import sys

import numpy as np
import optuna
import pytest

pytest.importorskip("scipy")

from trials.study import npgp  # noqa: E402

has_torch = importlib.util.find_spec("torch") is not None
IS_CAT = np.array([False, False, False, True])


def data(n=20, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.rand(n, 4)
    X[:, 3] = rng.randint(0, 3, n)
    return X, npgp.standardize(rng.randn(n)), rng


def fitted(n=20, seed=0):
    X, y, rng = data(n, seed)
    return npgp.fit(X, y, IS_CAT), X, y, rng


def numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for d in range(x.shape[-1]):
        up, down = x.copy(), x.copy()
        up[..., d] += eps
        down[..., d] -= eps
        g[..., d] = (f(up) - f(down)) / (2 * eps)
    return g


def test_the_marginal_likelihoods_gradient_is_its_derivative():
    X, y, rng = data()
    diff = X[:, None, :] - X[None, :, :]
    sqd = diff**2
    sqd[..., IS_CAT] = sqd[..., IS_CAT] > 0
    sqd = sqd.reshape(-1, 4)
    raw = rng.randn(6) * 0.5
    for deterministic in (False, True):
        _, g = npgp.neg_log_posterior(raw, sqd, y, 1e-6, deterministic)
        num = numeric_grad(lambda r, d=deterministic: npgp.neg_log_posterior(r, sqd, y, 1e-6, d)[0], raw)
        assert g == pytest.approx(num, rel=1e-5, abs=1e-6)
    assert g[-1] == 0.0  # a deterministic objective's noise is fixed


@pytest.mark.parametrize("running", [0, 1, 3])
def test_the_acquisitions_gradient_is_its_derivative_in_the_continuous_coordinates(running):
    gp, X, y, rng = fitted()
    threshold = float(y.max())
    acq = (npgp.LogEI(gp, threshold) if not running else
           npgp.QLogEI(gp, threshold, np.column_stack([rng.rand(running, 3), rng.randint(0, 3, running)]),
                       n_samples=128, seed=3))
    x = np.column_stack([rng.rand(6, 3), rng.randint(0, 3, 6)])
    value, g = acq.value_and_grad(x)
    assert value == pytest.approx(acq(x))
    for row in range(len(x)):
        num = numeric_grad(lambda v, r=row: acq(np.vstack([x[:r], v[None, :], x[r + 1:]]))[r], x[row])
        assert g[row, :3] == pytest.approx(num[:3], rel=1e-4, abs=1e-7)
    assert (g[:, 3] == 0).all()  # categorical: moved by the discrete search, never by gradient


def test_the_posterior_interpolates_the_training_points_and_is_unsure_far_from_them():
    gp, X, y, _ = fitted()
    post = gp.posterior(X)
    assert post["mean"] == pytest.approx(y, abs=3 * math.sqrt(gp.noise) + 0.05)
    assert (post["var"] <= gp.noise * 2 + 1e-6).all()
    far = gp.posterior(np.array([[9.0, 9.0, 9.0, 7.0]]))
    assert far["var"][0] == pytest.approx(gp.scale, rel=1e-6) and abs(far["mean"][0]) < 1e-6


@pytest.mark.skipif(not has_torch, reason="Optuna's GP needs torch")
def test_the_fit_posterior_and_acquisitions_equal_optunas_torch_code():
    import torch
    from optuna._gp import acqf as tacqf
    from optuna._gp import gp as tgp
    from optuna._gp import prior as tprior
    from optuna._gp.search_space import SearchSpace
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    X, y, rng = data(25, seed=1)
    ours = npgp.fit(X, y, IS_CAT)
    theirs = tgp.fit_kernel_params(X, y, IS_CAT, tprior.default_log_prior, 1e-6, False)
    assert ours.lam == pytest.approx(theirs.inverse_squared_lengthscales.numpy(), rel=1e-6)
    assert (ours.scale, ours.noise) == pytest.approx((theirs.kernel_scale.item(), theirs.noise_var.item()), rel=1e-6)
    f64 = torch.float64
    same = tgp.GPRegressor(torch.from_numpy(IS_CAT), torch.from_numpy(X), torch.from_numpy(y),
                           torch.from_numpy(ours.lam), torch.tensor(ours.scale, dtype=f64),
                           torch.tensor(ours.noise, dtype=f64))
    same._cache_matrix()
    x = np.column_stack([rng.rand(7, 3), rng.randint(0, 3, 7)])
    mean, var = same.posterior(torch.from_numpy(x))
    post = ours.posterior(x)
    assert post["mean"] == pytest.approx(mean.numpy(), abs=1e-12)
    assert post["var"] == pytest.approx(var.numpy(), abs=1e-12)
    space = SearchSpace({"a": FloatDistribution(0, 1), "b": FloatDistribution(0, 1), "c": FloatDistribution(0, 1),
                         "d": CategoricalDistribution([0, 1, 2])})
    threshold = float(y.max())
    running = np.column_stack([rng.rand(2, 3), [0, 2]])
    q = tacqf.qLogEI(same, space, threshold, 128, 5, running)
    cond = q._cond_gpr
    mean_r = same.posterior(torch.from_numpy(running))[0]
    drawn = ((cond._fantasy_samples - mean_r) @ torch.linalg.inv(cond._cov_rr_post_chol).T).numpy()
    fixed = np.column_stack([drawn, cond._fixed_samples_x.numpy()])  # Optuna's Sobol draws, given to ours
    for theirs_acq, ours_acq in ((tacqf.LogEI(same, space, threshold), npgp.LogEI(ours, threshold)),
                                 (q, npgp.QLogEI(ours, threshold, running, n_samples=128, seed=5, fixed=fixed))):
        value, g = ours_acq.value_and_grad(x)
        for row in range(len(x)):
            v, tg = theirs_acq.eval_acqf_with_grad(x[row])
            assert value[row] == pytest.approx(v, abs=1e-9)
            assert g[row, :3] == pytest.approx(tg[:3], abs=1e-9)


def test_halton_points_are_stratified_scrambled_and_seeded():
    rng = np.random.RandomState(0)
    points = npgp.halton(64, 3, rng)
    assert points.shape == (64, 3) and ((points >= 0) & (points < 1)).all()
    assert sorted(np.floor(points[:, 0] * 64).astype(int).tolist()) == list(range(64))  # base 2: one per cell
    assert sorted(np.floor(points[:27, 1] * 27).astype(int).tolist()) == list(range(27))  # base 3
    assert not np.allclose(points, npgp.halton(64, 3, np.random.RandomState(1)))
    assert np.array_equal(npgp.halton(64, 3, np.random.RandomState(0)), points)
    z = npgp.normal_qmc(512, 2, seed=4)
    assert np.isfinite(z).all() and abs(z.mean()) < 0.05 and abs(z.std() - 1) < 0.05


def test_a_failed_fit_falls_back_to_the_default_kernel(monkeypatch, caplog):
    X, y, _ = data()
    monkeypatch.setattr(npgp, "_fit_raw", lambda *a: (_ for _ in ()).throw(np.linalg.LinAlgError("not PD")))
    gp = npgp.fit(X, y, IS_CAT)
    assert (gp.lam.tolist(), gp.scale, gp.noise) == ([1.0] * 4, 1.0, 1.0)


def branin(x, y):
    return ((y - 5.1 / (4 * math.pi**2) * x**2 + 5 / math.pi * x - 6) ** 2
            + 10 * (1 - 1 / (8 * math.pi)) * math.cos(x) + 10)


def test_the_sampler_searches_every_parameter_type_and_beats_random_on_branin():
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    found = {}
    for name, sampler in (("gp", npgp.NumpyGPSampler(seed=0, n_startup_trials=8)),
                          ("random", optuna.samplers.RandomSampler(seed=0))):
        study = optuna.create_study(sampler=sampler)
        for _ in range(30):
            t = study.ask()
            x, y = t.suggest_float("x", -5, 10), t.suggest_float("y", 0, 15)
            n = t.suggest_int("n", 1, 64, log=True)
            c = t.suggest_categorical("c", ["a", "b", "c"])
            k = t.suggest_int("k", 0, 40, step=2)  # 21 choices: the line search
            assert 1 <= n <= 64 and c in "abc" and k % 2 == 0
            study.tell(t, branin(x, y) + (c != "b") + abs(k - 20) / 40)
        found[name] = study.best_value
        if name == "gp":
            by_gp = [t for t in study.trials if "gp:relative_params:0" in t.system_attrs]
            assert len(by_gp) == 22
    assert found["gp"] < 1.5 and found["gp"] < found["random"]


def test_running_trials_make_the_next_suggestion_go_elsewhere():
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=npgp.NumpyGPSampler(seed=1, n_startup_trials=6))
    for _ in range(12):
        t = study.ask()
        study.tell(t, (t.suggest_float("x", 0, 1) - 0.3) ** 2)
    first = study.ask()
    x1 = first.suggest_float("x", 0, 1)  # left running: the next one is made with q log EI
    second = study.ask()
    x2 = second.suggest_float("x", 0, 1)
    assert abs(x1 - 0.3) < 0.1 and x1 != x2


def test_the_default_sampler_never_imports_torch():
    code = ("import sys, optuna; from trials.study.samplers import make_sampler\n"
            "optuna.logging.set_verbosity(optuna.logging.ERROR)\n"
            "s = optuna.create_study(sampler=make_sampler('gp-warped', seed=0, n_startup=3))\n"
            "for i in range(6):\n"
            "    t = s.ask(); s.tell(t, t.suggest_float('x', 0, 1) ** 2 + t.suggest_int('n', 1, 5))\n"
            "    if i == 4: s.ask().suggest_float('x', 0, 1)\n"
            "assert sum('gp:relative_params:0' in t.system_attrs for t in s.trials) == 4\n"
            "print(sorted(m for m in ('torch', 'scipy.stats', 'scipy.optimize') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['scipy.optimize']"]


def test_halton_skips_no_digit_the_plain_digit_by_digit_sequence_has():
    def reference(n, dim, rng):  # every digit of every index through its permutation, the zero ones too
        out = np.empty((n, dim))
        for d, p in enumerate(npgp._primes(dim)):
            rest, value, unit = np.arange(n, dtype=np.int64), np.zeros(n), 1.0 / p
            for _ in range(max(1, math.ceil(53 / math.log2(p)))):
                value += rng.permutation(p)[rest % p] * unit
                rest //= p
                unit /= p
            out[:, d] = value
        return out

    for n, dim in ((1, 1), (2048, 2), (128, 5), (3000, 12)):
        for seed in (0, 1):
            assert np.array_equal(npgp.halton(n, dim, np.random.RandomState(seed)),
                                  reference(n, dim, np.random.RandomState(seed)))
