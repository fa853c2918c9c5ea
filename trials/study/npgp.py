"""Optuna's GPSampler for one objective, in NumPy and SciPy: the same model and search, without torch.

Optuna's GPSampler builds its GP with torch, for autograd. In the default sampler's own process
(:mod:`trials.study.ahead`) that cost ~0.9 s of CPU to import torch, ~0.6 s more in the first
suggestion, and 23-35 ms a suggestion after: with every core running trials, that CPU comes out of the
trials, whatever process it runs in (``benchmarks/README.md`` part 8). Here the gradients are written
out, and nothing but NumPy and SciPy (its ``optimize``, which brings ``linalg`` and ``special``) is loaded:

- the model is Optuna's: a Matern 5/2 kernel with one lengthscale per parameter (Hamming distance for
  categorical ones), Optuna's priors on the inverse squared lengthscales, the kernel scale and the
  noise, fitted by L-BFGS-B on the log marginal likelihood from the last fit's values (from the
  defaults when that fails, then the defaults as they are);
- so is the acquisition: log EI without running trials; with them, q log EI (the running trials'
  values drawn from the posterior at 128 quasi-random points, the candidate's conditioned on them; the
  log of the mean clamped improvement, which is Optuna's log-mean-exp of their logs without a log and an
  exp per draw);
- and the search: 2048 quasi-random points, the best of them and 9 more by roulette, plus the best
  trial, each improved by local search (L-BFGS-B on lengthscale-scaled continuous coordinates, batched
  with Optuna's greenlet L-BFGS-B; exhaustive or line search for each discrete parameter).

One difference: the quasi-random points are a scrambled Halton sequence, not Optuna's Sobol
(``scipy.stats.qmc``, 0.2-0.6 s to import). Several objectives or constraints go to Optuna's own code
(torch). ``tests/study/test_npgp.py`` checks values and gradients against finite differences, and
against Optuna's torch code where torch is installed; part 3 of the benchmarks compares the searches.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from trials.study import optuna_internals as internals
from trials.study.optuna_internals import (
    DEFAULT_MINIMUM_NOISE_VAR,
    GPSearchSpace,
    gp_params,
    is_constrained_optimization,
    round_one_normalized_param,
)

_STANDARDIZE_EPS = 1e-10
_EPS = 1e-12  # Optuna's: log utilities are clamped at log(EPS)
_STABILIZING_NOISE = 1e-12
_MAX_QMC_SEED = 1 << 30
# Optuna's, so a running trial's parameters read back the same
_RELATIVE_PARAMS_KEY, _SYSTEM_ATTR_MAX_LENGTH = internals.GP_RELATIVE_PARAMS_KEY, internals.GP_SYSTEM_ATTR_MAX_LENGTH
_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_SQRT_HALF_PI = math.sqrt(0.5 * math.pi)
_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))
_logger = optuna.logging.get_logger(__name__)


# -- the kernel
def matern52(d2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Matern 5/2 kernel of squared distances, and its derivative with respect to them."""
    s = np.sqrt(5.0 * d2)
    e = np.exp(-s)
    return e * ((5.0 / 3.0) * d2 + s + 1.0), (-5.0 / 6.0) * (s + 1.0) * e


def _weighted_sqdist(a: np.ndarray, b: np.ndarray, lam: np.ndarray, is_cat: np.ndarray) -> np.ndarray:
    """``sum_d lam_d * sqd_d(a, b)`` for every pair of rows: (m, D), (n, D) -> (m, n)."""
    out = np.zeros((a.shape[0], b.shape[0]))
    for d in range(a.shape[1]):
        diff = a[:, d, None] - b[None, :, d]
        out += lam[d] * ((diff != 0.0) if is_cat[d] else diff * diff)
    return out


def standardize(values: np.ndarray) -> np.ndarray:
    """Optuna's ``_standardize_values`` for one column: infinite values clipped to the finite range first."""
    finite = np.isfinite(values)
    if not finite.all():
        optuna.logging.get_logger("optuna").warning(
            "Clip non-finite values to the min/max finite values for GP fittings.")
        values = np.clip(values, values[finite].min() if finite.any() else 0.0,
                         values[finite].max() if finite.any() else 0.0)
    return np.asarray((values - values.mean()) / max(_STANDARDIZE_EPS, float(values.std())), dtype=np.float64)


class GP:
    """The posterior of a fitted GP: mean and variance at any points, and their gradients."""

    def __init__(self, X: np.ndarray, y: np.ndarray, is_cat: np.ndarray, lam: np.ndarray, scale: float,
                 noise: float) -> None:
        self.X, self.y, self.is_cat = X, y, is_cat
        self.lam, self.scale, self.noise = lam, float(scale), float(noise)
        K = self.scale * matern52(_weighted_sqdist(X, X, lam, is_cat))[0]
        K[np.diag_indices_from(K)] += self.noise
        self.chol = np.linalg.cholesky(K)
        self.alpha = self.solve(y)

    @property
    def length_scales(self) -> np.ndarray:
        return np.asarray(1.0 / np.sqrt(self.lam), dtype=np.float64)

    def solve(self, b: np.ndarray) -> np.ndarray:
        """``K^-1 b`` (b of shape (n,) or (n, m))."""
        import scipy.linalg

        return np.asarray(scipy.linalg.cho_solve((self.chol, True), b), dtype=np.float64)

    def kernel(self, a: np.ndarray, b: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """k(a, b) (b = the training points) and d k / d sqdist, both (m, n)."""
        value, deriv = matern52(_weighted_sqdist(a, self.X if b is None else b, self.lam, self.is_cat))
        return self.scale * value, self.scale * deriv

    def contract_grad(self, x: np.ndarray, weights: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        """``sum_i weights[k, i] * d k(x_k, b_i) / d x_k`` for ``weights`` = dk/dsqdist times what multiplies k:
        (B, D). Categorical coordinates get 0 (the local search never moves them by gradient)."""
        b = self.X if b is None else b
        g = 2.0 * self.lam * (x * weights.sum(axis=1, keepdims=True) - weights @ b)
        g[:, self.is_cat] = 0.0
        return np.asarray(g, dtype=np.float64)

    def posterior(self, x: np.ndarray, *, grad: bool = False) -> dict[str, np.ndarray]:
        """mean and var (clamped at 0) at the rows of ``x`` (B, D); with ``grad``, dmean and dvar (B, D) too,
        and what q log EI builds on (k_xX, its derivative, K^-1 k_Xx)."""
        k, dk = self.kernel(x)
        v = self.solve(k.T).T  # (B, n): K^-1 k(X, x)
        mean = k @ self.alpha
        raw_var = self.scale - np.einsum("bn,bn->b", k, v)
        var = np.maximum(raw_var, 0.0)
        out = {"mean": mean, "var": var, "k": k, "dk": dk, "v": v}
        if grad:
            out["dmean"] = self.contract_grad(x, dk * self.alpha)
            out["dvar"] = np.where((raw_var > 0.0)[:, None], -2.0 * self.contract_grad(x, dk * v), 0.0)
        return out


def fit(X: np.ndarray, y: np.ndarray, is_cat: np.ndarray, *, previous: GP | None = None,
        minimum_noise: float = DEFAULT_MINIMUM_NOISE_VAR, deterministic: bool = False,
        gtol: float = 1e-2) -> GP:
    """Optuna's ``fit_kernel_params``: the kernel parameters that maximise the log marginal likelihood plus
    the log prior, from the ``previous`` fit's (of as many parameters) and then from the defaults; if both
    fail, the defaults."""
    n_dims = X.shape[1]
    starts = [(np.ones(n_dims), 1.0, 1.0)]
    if previous is not None and previous.lam.shape == (n_dims,):
        starts.insert(0, (previous.lam, previous.scale, previous.noise))
    error: Exception | None = None
    for lam, scale, noise in starts:
        start = np.concatenate([np.log(lam), [math.log(scale), math.log(noise - 0.99 * minimum_noise)]])
        try:
            raw = _fit_raw(X, y, is_cat, start, minimum_noise, deterministic, gtol)
            return _gp_of_raw(X, y, is_cat, raw, minimum_noise, deterministic)
        except (RuntimeError, np.linalg.LinAlgError, ValueError) as err:
            error = err
    _logger.warning(f"The optimization of kernel parameters failed: \n{error}\n"
                    "The default initial kernel parameters will be used instead.")
    return GP(X, y, is_cat, np.ones(n_dims), 1.0, 1.0)


def _gp_of_raw(X: np.ndarray, y: np.ndarray, is_cat: np.ndarray, raw: np.ndarray, minimum_noise: float,
               deterministic: bool) -> GP:
    n_dims = X.shape[1]
    noise = minimum_noise if deterministic else math.exp(raw[n_dims + 1]) + minimum_noise
    return GP(X, y, is_cat, np.exp(raw[:n_dims]), math.exp(raw[n_dims]), noise)


def neg_log_posterior(raw: np.ndarray, sqd: np.ndarray, y: np.ndarray, minimum_noise: float,
                      deterministic: bool) -> tuple[float, np.ndarray]:
    """Minus (log marginal likelihood + Optuna's log prior) of the raw parameters (log lengthscales, log
    scale, log(noise - minimum)) and its gradient; ``sqd`` the training points' squared differences (n*n, D)."""
    import scipy.linalg

    n, n_dims = y.shape[0], sqd.shape[1]
    lam, scale = np.exp(raw[:n_dims]), math.exp(raw[n_dims])
    noise_part = 0.0 if deterministic else math.exp(raw[n_dims + 1])
    noise = minimum_noise + noise_part
    m, dm = matern52((sqd @ lam).reshape(n, n))
    K = scale * m
    K[np.diag_indices(n)] += noise
    chol = np.linalg.cholesky(K)
    alpha = scipy.linalg.cho_solve((chol, True), y)
    mll = -float(np.log(np.diag(chol)).sum()) - 0.5 * float(y @ alpha)
    G = 0.5 * (np.outer(alpha, alpha) - scipy.linalg.cho_solve((chol, True), np.eye(n)))  # d mll / d K
    g_lam = (G * (scale * dm)).reshape(-1) @ sqd
    g_scale = float((G * m).sum())
    g_noise = float(np.trace(G))
    prior = (-float((0.1 / lam + 0.1 * lam).sum()) + (math.log(scale) - scale)
             + (0.1 * math.log(noise) - 30.0 * noise))
    grad = np.empty_like(raw)
    grad[:n_dims] = -(g_lam + 0.1 / lam**2 - 0.1) * lam
    grad[n_dims] = -(g_scale + 1.0 / scale - 1.0) * scale
    grad[n_dims + 1] = 0.0 if deterministic else -(g_noise + 0.1 / noise - 30.0) * noise_part
    return -(mll + prior), grad


def _fit_raw(X: np.ndarray, y: np.ndarray, is_cat: np.ndarray, start: np.ndarray, minimum_noise: float,
             deterministic: bool, gtol: float) -> np.ndarray:
    import scipy.optimize

    diff = X[:, None, :] - X[None, :, :]
    sqd = diff * diff
    sqd[..., is_cat] = (sqd[..., is_cat] > 0.0).astype(np.float64)
    sqd = sqd.reshape(-1, X.shape[1])
    res = scipy.optimize.minimize(neg_log_posterior, start, args=(sqd, y, minimum_noise, deterministic),
                                  jac=True, method="l-bfgs-b", options={"gtol": gtol})
    if not res.success:
        raise RuntimeError(f"Optimization failed: {res.message}")
    return np.asarray(res.x, dtype=np.float64)


# -- the acquisition functions
def log_h(z: np.ndarray) -> np.ndarray:
    """log E[max(0, N(0,1) + z)], Eq. (9) of Ament et al. 2023 as Optuna computes it."""
    import scipy.special

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = np.log(0.5 * z * scipy.special.erfc(-_SQRT_HALF * z) + np.exp(-0.5 * z * z) * _INV_SQRT_2PI)
        small = z < -25
        if small.any():
            zs = z[small]
            out[small] = (-0.5 * zs**2 - _LOG_SQRT_2PI
                          + np.log(1 + _SQRT_HALF_PI * zs * scipy.special.erfcx(-_SQRT_HALF * zs)))
    return np.asarray(out, dtype=np.float64)


class LogEI:
    """log EI over the best value so far (Optuna's ``LogEI``)."""

    def __init__(self, gp: GP, threshold: float) -> None:
        self.gp, self.threshold = gp, threshold

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.value_and_grad(x, grad=False)[0]

    def value_and_grad(self, x: np.ndarray, *, grad: bool = True) -> tuple[np.ndarray, np.ndarray]:
        import scipy.special

        post = self.gp.posterior(x, grad=grad)
        sigma = np.sqrt(post["var"] + _STABILIZING_NOISE)
        z = (post["mean"] - self.threshold) / sigma
        lh = log_h(z)
        value = lh + np.log(sigma)
        if not grad:
            return value, np.empty((0,))
        dlh = np.exp(scipy.special.log_ndtr(z) - lh)  # d log h / dz = Phi(z) / h(z)
        dsigma = post["dvar"] / (2.0 * sigma)[:, None]
        g = (dlh / sigma)[:, None] * (post["dmean"] - z[:, None] * dsigma) + dsigma / sigma[:, None]
        return value, g


class QLogEI:
    """q log EI with the running trials (Optuna's ``qLogEI`` and ``ConditionalGPRegressor``): their values are
    drawn once from the posterior at fixed quasi-random normal points; the candidate's value is drawn from
    its posterior conditioned on them; the utility is the mean over draws of the best improvement."""

    def __init__(self, gp: GP, threshold: float, running: np.ndarray, *, n_samples: int, seed: int,
                 fixed: np.ndarray | None = None) -> None:
        self.gp, self.threshold, self.running = gp, threshold, running
        if fixed is None:  # (the tests give Optuna's draws)
            fixed = normal_qmc(n_samples, running.shape[0] + 1, seed)
        self.z_x = fixed[:, -1]
        post = gp.posterior(running)
        k_rr = gp.kernel(running, running)[0]
        cov_rr = k_rr - post["k"] @ post["v"].T  # posterior covariance of the running trials (r, r)
        cov_rr[np.diag_indices_from(cov_rr)] = np.maximum(np.diag(cov_rr), 0.0) + _STABILIZING_NOISE
        self.chol_rr = np.linalg.cholesky(cov_rr)
        self.fantasy = post["mean"] + fixed[:, :-1] @ self.chol_rr.T  # (Q, r)
        import scipy.linalg

        self.A = scipy.linalg.cho_solve((self.chol_rr, True), (self.fantasy - post["mean"]).T)  # (r, Q)
        self.V_r = post["v"].T  # (n, r): K^-1 k(X, R)
        # the best improvement of the running trials in each draw (clamped at EPS, as Optuna's log is)
        self.best_fantasy = np.maximum(self.fantasy - threshold, _EPS).max(axis=1)  # (Q,)
        self._A_z = np.vstack([self.A, self.z_x])  # (r + 1, Q): the draws' conditional mean and spread at once

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.value_and_grad(x, grad=False)[0]

    def value_and_grad(self, x: np.ndarray, *, grad: bool = True) -> tuple[np.ndarray, np.ndarray]:
        import scipy.linalg
        import scipy.special

        gp = self.gp
        post = gp.posterior(x, grad=grad)
        k_xr, dk_xr = gp.kernel(x, self.running)  # (B, r)
        c = k_xr - post["k"] @ self.V_r  # posterior cross-covariance (B, r)
        vc = scipy.linalg.cho_solve((self.chol_rr, True), c.T, check_finite=False).T  # (B, r)
        raw_cv = post["var"] + _STABILIZING_NOISE - np.einsum("br,br->b", c, vc)
        cv = np.maximum(raw_cv, 0.0)
        sd = np.sqrt(cv)
        # each draw's improvement: mean + c A (conditioned on the running trials' draw) + sd z - threshold,
        # (B, Q) built in one array (2048 x 128 of them in a search's first pass: fresh arrays cost more)
        improvement = np.column_stack([c, sd]) @ self._A_z
        improvement += (post["mean"] - self.threshold)[:, None]
        # Optuna's log-mean-exp of the log improvements (each clamped at log EPS) is the log of the mean of
        # the improvements clamped at EPS: no log or exp over the draws
        best_is_candidate = improvement > self.best_fantasy if grad else None
        best = np.maximum(improvement, self.best_fantasy, out=improvement)  # (B, Q), >= EPS
        total = best.sum(axis=1)
        value = np.log(total) - math.log(best.shape[1])
        if best_is_candidate is None:
            return value, np.empty((0,))
        # d value / d samples[b, q] = 1 / total where the candidate's improvement is the draw's best (not clamped)
        w = best_is_candidate / total[:, None]  # (B, Q)
        # d c_j / d x for each running trial j: (B, r, D)
        n_run = self.running.shape[0]
        dc = np.empty((x.shape[0], n_run, x.shape[1]))
        for j in range(n_run):
            dc[:, j, :] = (gp.contract_grad(x, dk_xr[:, j:j + 1], self.running[j:j + 1])
                           - gp.contract_grad(x, post["dk"] * self.V_r[:, j]))
        dcv = post["dvar"] - 2.0 * np.einsum("brd,br->bd", dc, vc)
        dsd = np.where((raw_cv > 0.0)[:, None], dcv / (2.0 * np.where(sd > 0, sd, 1.0))[:, None], 0.0)
        g = (w.sum(axis=1)[:, None] * post["dmean"] + np.einsum("brd,br->bd", dc, w @ self.A.T)
             + (w @ self.z_x)[:, None] * dsd)
        return value, g


# -- quasi-random points
def _primes(count: int) -> list[int]:
    found: list[int] = []
    candidate = 2
    while len(found) < count:
        if all(candidate % p for p in found if p * p <= candidate):
            found.append(candidate)
        candidate += 1
    return found


def halton(n: int, dim: int, rng: np.random.RandomState) -> np.ndarray:
    """``n`` points of a Halton sequence in [0, 1)^dim, each digit of each coordinate through a random
    permutation (random-digit scrambling: the points fill the cube as evenly, without the plain
    sequence's correlated high dimensions); (n, dim)."""
    out = np.empty((n, dim))
    index = np.arange(n, dtype=np.int64)
    for d, p in enumerate(_primes(dim)):
        rest, value, unit = index.copy(), np.zeros(n), 1.0 / p
        for _ in range(max(1, math.ceil(53 / math.log2(p)))):
            if rest is None:  # every index's higher digits are 0: each point gets the same scrambled digit
                value += rng.permutation(p)[0] * unit
            else:
                value += rng.permutation(p)[rest % p] * unit
                rest //= p
                if not rest.any():
                    rest = None
            unit /= p
        out[:, d] = value
    return out


def normal_qmc(n: int, dim: int, seed: int) -> np.ndarray:
    """Quasi-random standard normal points: the scrambled Halton points through the normal quantile."""
    import scipy.special

    u = np.clip(halton(n, dim, np.random.RandomState(seed)), 1e-12, 1.0 - 1e-12)
    return np.asarray(scipy.special.ndtri(u), dtype=np.float64)


def sample_normalized(space: GPSearchSpace, n: int, rng: np.random.RandomState) -> np.ndarray:
    """Optuna's ``_sample_normalized_params`` with the scrambled Halton points in place of Sobol's."""
    values = halton(n, space.dim, np.random.RandomState(rng.randint(np.iinfo(np.int32).max)))
    bounds, steps, scale_types = internals.gp_space_arrays(space)
    for i in range(space.dim):
        if space.is_categorical[i]:
            values[:, i] = np.floor(values[:, i] * bounds[i, 1])
        elif steps[i] != 0.0:
            values[:, i] = round_one_normalized_param(
                values[:, i], scale_types[i], (bounds[i, 0], bounds[i, 1]), steps[i])
    return values


# -- optimising the acquisition (Optuna's optim_mixed, with these gradients)
Acquisition = LogEI | QLogEI


def _gradient_ascent(acq: Acquisition, xs: np.ndarray, fvals: np.ndarray, cont: np.ndarray,
                     lengthscales: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from trials.study.optuna_internals import batched_lbfgsb

    if len(cont) == 0:
        return xs, fvals, np.zeros(len(fvals), dtype=bool)

    def neg_with_grad(scaled: np.ndarray, fixed: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        params = np.array(fixed)
        params[:, cont] = scaled * lengthscales
        value, g = acq.value_and_grad(params)
        return -np.atleast_1d(value), -g[:, cont] * lengthscales

    scaled_opt, neg_opt, n_iter = batched_lbfgsb(
        func_and_grad=neg_with_grad, x0_batched=xs[:, cont] / lengthscales, batched_args=(list(xs.copy()),),
        bounds=[(0, 1 / s) for s in lengthscales], pgtol=math.sqrt(tol), max_iters=200)
    opt = xs.copy()
    opt[:, cont] = scaled_opt * lengthscales
    f_opt = -neg_opt
    updated = (f_opt > fvals) & (n_iter > 0)
    return np.where(updated[:, None], opt, xs), np.where(updated, f_opt, fvals), updated


def _exhaustive(acq: Acquisition, x0: np.ndarray, f0: float, i: int,
                choices: np.ndarray) -> tuple[np.ndarray, float, bool]:
    if len(choices) == 1:
        return x0, f0, False
    others = choices[choices != x0[i]]
    xs = np.repeat(x0[None, :], len(others), axis=0)
    xs[:, i] = others
    f = acq(xs)
    best = int(np.argmax(f))
    if f[best] > f0:
        return xs[best], float(f[best]), True
    return x0, f0, False


def _line_search(acq: Acquisition, x0: np.ndarray, f0: float, i: int, grids: np.ndarray,
                 xtol: float) -> tuple[np.ndarray, float, bool]:
    import scipy.optimize

    if len(grids) == 1:
        return x0, f0, False

    def nearest(v: float) -> int:
        j = int(np.clip(np.searchsorted(grids, v), 1, len(grids) - 1))
        return j - 1 if abs(v - grids[j - 1]) < abs(v - grids[j]) else j

    current = nearest(x0[i])
    cache = {current: -f0}
    x = x0.copy()

    def neg_at(j: int) -> float:
        if j not in cache:
            x[i] = grids[j]
            cache[j] = -float(acq(x[None, :])[0])
        return cache[j]

    def interpolated(v: float) -> float:
        if v < grids[0] or v > grids[-1]:
            return math.inf
        right = int(np.clip(np.searchsorted(grids, v), 1, len(grids) - 1))
        left = right - 1
        w_left = (grids[right] - v) / (grids[right] - grids[left])
        return float(w_left * neg_at(left) + (1.0 - w_left) * neg_at(right))

    res = scipy.optimize.minimize_scalar(interpolated, bracket=(grids[0] - 1e-12, grids[current], grids[-1] + 1e-12),
                                         method="brent", tol=xtol)
    best = nearest(float(res.x))
    f_best = -neg_at(best)
    if best != current and f_best > f0:
        x[i] = grids[best]
        return x, f_best, True
    return x0, f0, False


def _local_search(acq: Acquisition, space: GPSearchSpace, lengthscales: np.ndarray,
                  xs0: np.ndarray, *, tol: float = 1e-4, max_iter: int = 100) -> tuple[np.ndarray, np.ndarray]:
    cont = space.continuous_indices
    scales = lengthscales[cont]
    discrete = space.discrete_indices
    choices_of = space.get_choices_of_discrete_params()
    xtols = [np.min(np.diff(ch), initial=np.inf) / 4 for ch in choices_of]
    xs = xs0.copy()
    fvals = acq(xs)
    CONTINUOUS = -1
    last_changed = np.full(len(xs), CONTINUOUS, dtype=int)
    remaining = np.arange(len(xs))
    for _ in range(max_iter):
        xs[remaining], fvals[remaining], updated = _gradient_ascent(acq, xs[remaining], fvals[remaining], cont,
                                                                    scales, tol)
        last_changed = np.where(updated, CONTINUOUS, last_changed)
        for i, choices, xtol in zip(discrete, choices_of, xtols, strict=True):
            converged = last_changed == i
            last_changed, remaining = last_changed[~converged], remaining[~converged]
            if remaining.size == 0:
                return xs, fvals
            changed = np.zeros(len(remaining), dtype=bool)
            for k, row in enumerate(remaining):
                search = (_exhaustive if space.is_categorical[i] or len(choices) <= 16 else
                          lambda a, x0, f0, j, ch, _t=xtol: _line_search(a, x0, f0, j, ch, _t))
                xs[row], fvals[row], changed[k] = search(acq, xs[row], float(fvals[row]), i, choices)
            last_changed = np.where(changed, i, last_changed)
        converged = last_changed == CONTINUOUS
        remaining, last_changed = remaining[~converged], last_changed[~converged]
        if remaining.size == 0:
            return xs, fvals
    _logger.warning("local_search_mixed: Local search did not converge.")
    return xs, fvals


def optimize(acq: Acquisition, space: GPSearchSpace, warm_start: np.ndarray, *,
             rng: np.random.RandomState, n_preliminary: int = 2048, n_local_search: int = 10,
             tol: float = 1e-4) -> np.ndarray:
    """Optuna's ``optimize_acqf_mixed``: the best of ``n_preliminary`` quasi-random points, ``n_local_search - 2``
    more drawn with probability exp(acquisition), and ``warm_start`` (the best trial), each locally improved."""
    sampled = sample_normalized(space, n_preliminary, rng)
    f = acq(sampled)
    top = int(np.argmax(f))
    probs = np.exp(f - f[top])
    probs[top] = 0.0
    probs /= probs.sum()
    nonzero = int(np.count_nonzero(probs > 0.0))
    extra = min(n_local_search - len(warm_start) - 1, nonzero)
    if extra == nonzero:
        _logger.warning("Study already converged, so the number of local search is reduced.")
    chosen = np.array([top])
    if extra > 0:
        chosen = np.append(chosen, rng.choice(len(sampled), size=extra, replace=False, p=probs))
    starts = np.vstack([sampled[chosen, :], warm_start])
    xs, fvals = _local_search(acq, space, acq.gp.length_scales, starts, tol=tol)
    return np.asarray(xs[int(np.argmax(fvals))], dtype=np.float64)


# -- trials stopped early, as values a GP can fit (also OSS Vizier's requests: trials.study.vizier)
def _pruned_score(trial: FrozenTrial, maximize: bool) -> tuple[float, float]:
    """Optuna TPE's ``_get_pruned_trial_score`` (optuna/samplers/_tpe/sampler.py), lower is better: a trial
    that got further first, then its value at its last step (NaN: the worst at that step)."""
    if not trial.intermediate_values:
        return 1.0, 0.0
    step, value = max(trial.intermediate_values.items())
    if math.isnan(value):
        return -step, math.inf
    return -step, -value if maximize else value


def stopped_as_values(completed: Sequence[FrozenTrial], stopped: Sequence[FrozenTrial],
                      direction: StudyDirection) -> list[FrozenTrial]:
    """The trials stopped early (PRUNED) as completed trials with a value a model can fit: copies, each
    valued below every completed trial, in Optuna TPE's order of pruned trials.

    Optuna's TPE (``_split_trials``, optuna/samplers/_tpe/sampler.py) ranks every completed trial above
    every pruned one, and pruned trials among themselves by how far they got (a later last step first),
    then by their value at that step. A GP needs numbers, not an order: the stopped trials get values
    spaced below the worst completed value by the completed values' mean gap (equal scores, equal
    values), so that order is exactly what the model sees; a sampler that warps its values by rank
    (:mod:`trials.study.warped_gp`, as OSS Vizier's half-rank warp does) then sees the stopped trials as
    the bottom of its ranking, whatever the gap. With no completed trial yet, the stopped trials' order
    alone is their value. Why below and not at the last value: a trial is stopped because it was behind
    the trials that completed at the same step, and what its value there says of its end is only that it
    would rank low; its early value read as a final one would rank it above completed trials that ended
    poorly but ran to their end (issue 48)."""
    maximize = direction == StudyDirection.MAXIMIZE
    sign = 1.0 if maximize else -1.0
    finals = [sign * t.values[0] for t in completed if t.values and math.isfinite(t.values[0])]
    if finals:
        worst = min(finals)
        gap = (max(finals) - worst) / max(1, len(finals) - 1)
        if not gap > 0:
            gap = max(abs(worst) * 0.01, 1e-3)
    else:
        worst, gap = 0.0, 1.0
    scores = sorted({_pruned_score(t, maximize) for t in stopped})
    rank = {score: i for i, score in enumerate(scores)}
    out = []
    for t in stopped:
        shadow = copy.copy(t)
        shadow.values = [sign * (worst - gap * (1 + rank[_pruned_score(t, maximize)]))]
        out.append(shadow)
    return out


class NumpyGPSampler(optuna.samplers.GPSampler):
    """GPSampler whose single-objective, unconstrained suggestions are made by this module (no torch);
    the other cases are Optuna's own (and need torch).

    Unlike Optuna's GPSampler, it learns from the trials stopped early (PRUNED): they count toward its
    random start-up, and its GP fits them below every completed trial in Optuna TPE's order of pruned
    trials (:func:`stopped_as_values`). Optuna's GPSampler reads COMPLETE trials
    only, so with early stopping on a job whose trials were mostly stopped never left its start-up."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._gp_cache: GP | None = None

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        """GPSampler's, without entering ``torch.device`` (which imports torch)."""
        if search_space == {}:
            return {}
        trials = internals.study_trials(study, (TrialState.COMPLETE, TrialState.RUNNING, TrialState.PRUNED))
        completed = [t for t in trials if t.state == TrialState.COMPLETE]
        stopped = [t for t in trials if t.state == TrialState.PRUNED and search_space.keys() <= t.params.keys()]
        running = [t for t in trials
                   if t.state == TrialState.RUNNING and search_space.keys() <= gp_params(t).keys()]
        if len(completed) + len(stopped) < internals.GPSettings(self).n_startup_trials:
            return {}  # the start-up counts every finished trial, stopped early or not (issue 48)
        if len(study.directions) == 1 and stopped:
            completed = completed + stopped_as_values(completed, stopped, study.direction)
        if not completed:
            return {}
        params = self._sample_relative_impl(study, completed, running, search_space)
        if params != {}:
            text = json.dumps(params)
            for i in range(0, len(text), _SYSTEM_ATTR_MAX_LENGTH):
                internals.study_storage(study).set_trial_system_attr(
                    internals.storage_id(trial), f"{_RELATIVE_PARAMS_KEY}:{i // _SYSTEM_ATTR_MAX_LENGTH}",
                    text[i:i + _SYSTEM_ATTR_MAX_LENGTH])
        return params

    def _sample_relative_impl(self, study: optuna.Study, completed_trials: list[FrozenTrial],
                              running_trials: list[FrozenTrial],
                              search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if len(study.directions) != 1 or is_constrained_optimization(completed_trials):
            import torch

            with torch.device("cpu"):
                return super()._sample_relative_impl(study, completed_trials, running_trials, search_space)
        settings, rng = internals.GPSettings(self), internals.gp_rng(self)
        space = GPSearchSpace(search_space)
        X = space.get_normalized_params(completed_trials)
        sign = -1.0 if study.direction == StudyDirection.MINIMIZE else 1.0
        y = standardize(sign * np.array([t.values[0] for t in completed_trials], dtype=np.float64))
        gp = self._gp_cache = fit(X, y, space.is_categorical, previous=self._gp_cache,
                                  minimum_noise=settings.minimum_noise, deterministic=settings.deterministic)
        threshold = float(y.max())
        acq: Acquisition
        if running_trials:
            running = space.get_normalized_params(running_trials, [gp_params(t) for t in running_trials])
            acq = QLogEI(gp, threshold, running, n_samples=settings.n_qmc_samples_qei,
                         seed=int(rng.randint(_MAX_QMC_SEED)))
        else:
            acq = LogEI(gp, threshold)
        x = optimize(acq, space, X[np.argmax(y), np.newaxis], rng=rng, n_preliminary=settings.n_preliminary_samples,
                     n_local_search=settings.n_local_search, tol=settings.tol)
        return space.get_unnormalized_param(x)


__all__ = ["GP", "LogEI", "NumpyGPSampler", "QLogEI", "fit", "halton", "optimize"]
