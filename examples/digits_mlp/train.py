"""A one-hidden-layer numpy MLP on scikit-learn's bundled digits, trained epoch by epoch as a trial.

Run it alone (``python examples/digits_mlp/train.py --learning_rate=0.1``), as a container
ENTRYPOINT (``trials-run examples/digits_mlp/train.py``), or tuned (``trials sweep
search_spaces/digits_mlp.yaml``). It reports ``accuracy`` (validation, maximize) and ``loss``
(training cross-entropy) every epoch, checkpoints every epoch, resumes from the last checkpoint,
stops between epochs when asked, and saves the model into the model directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import importlib.util
import json
import os

import numpy as np

import trials

SPEC = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                    os.pardir, "search_spaces", "digits_mlp.yaml"))
OPTIONS = {"checkpoint_format": "npz"}  # read by trials-run, passed to trials.main below
N_CLASSES = 10


@dataclasses.dataclass(frozen=True)
class Config:
    learning_rate: float = 0.1
    hidden_units: int = 64
    alpha: float = 1e-4
    batch_size: int = 32
    epochs: int = 10
    seed: int = 0
    validation_fraction: float = 0.2


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 8x8 digits shipped inside scikit-learn, read without importing scikit-learn."""
    found = importlib.util.find_spec("sklearn")
    if found is None or not found.submodule_search_locations:
        raise RuntimeError("this example reads the digits data bundled with scikit-learn: "
                           "pip install 'trials[examples]'")
    path = os.path.join(list(found.submodule_search_locations)[0], "datasets", "data",
                        "digits.csv.gz")
    with gzip.open(path, "rt") as file:
        data = np.loadtxt(file, delimiter=",")
    return data[:, :-1] / 16.0, data[:, -1].astype(np.int64)


def split(x: np.ndarray, y: np.ndarray, fraction: float, seed: int):
    order = np.random.default_rng(seed).permutation(len(y))
    n_val = int(round(len(y) * fraction))
    val, train = order[:n_val], order[n_val:]
    return x[train], y[train], x[val], y[val]


def init_params(n_in: int, n_hidden: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w1": rng.normal(0.0, np.sqrt(2.0 / n_in), (n_in, n_hidden)),
        "b1": np.zeros(n_hidden),
        "w2": rng.normal(0.0, np.sqrt(1.0 / n_hidden), (n_hidden, N_CLASSES)),
        "b2": np.zeros(N_CLASSES),
    }


def forward(params: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    hidden = np.maximum(x @ params["w1"] + params["b1"], 0.0)
    logits = hidden @ params["w2"] + params["b2"]
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    return hidden, probs


def train_epoch(params, x, y, *, learning_rate, alpha, batch_size, rng) -> float:
    """One pass of minibatch SGD with L2 penalty ``alpha``; returns the mean training loss."""
    order = rng.permutation(len(y))
    total = 0.0
    with np.errstate(all="ignore"):  # a diverging run is detected by its loss, not by warnings
        for start in range(0, len(y), batch_size):
            total += _sgd_step(params, x[order[start:start + batch_size]],
                               y[order[start:start + batch_size]], learning_rate, alpha)
    return total / len(y)


def _sgd_step(params, xb, yb, learning_rate, alpha) -> float:
    hidden, probs = forward(params, xb)
    loss = float(-np.log(probs[np.arange(len(yb)), yb]).sum())
    grad = probs
    grad[np.arange(len(yb)), yb] -= 1.0
    grad /= len(yb)
    g_w2 = hidden.T @ grad + alpha * params["w2"]
    g_hidden = (grad @ params["w2"].T) * (hidden > 0)
    g_w1 = xb.T @ g_hidden + alpha * params["w1"]
    params["w2"] -= learning_rate * g_w2
    params["b2"] -= learning_rate * grad.sum(axis=0)
    params["w1"] -= learning_rate * g_w1
    params["b1"] -= learning_rate * g_hidden.sum(axis=0)
    return loss


def accuracy(params, x, y) -> float:
    with np.errstate(all="ignore"):
        return float((forward(params, x)[1].argmax(axis=1) == y).mean())


def one_blas_thread():
    """Small matrices and parallel trials: BLAS threads only contend (75x slower measured here)."""
    try:
        from threadpoolctl import threadpool_limits  # installed with scikit-learn
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def objective(config: Config, ctx: trials.TrialContext) -> float:
    with one_blas_thread():
        return train(config, ctx)


def train(config: Config, ctx: trials.TrialContext) -> float:
    x, y = load_digits()
    x_train, y_train, x_val, y_val = split(x, y, config.validation_fraction, config.seed)
    params = ctx.restore() or init_params(x.shape[1], config.hidden_units, config.seed)
    acc = accuracy(params, x_val, y_val)
    for epoch in ctx.steps(config.epochs):  # continues after the restored checkpoint's epoch
        rng = np.random.default_rng([config.seed, epoch])  # same batches whether resumed or not
        loss = train_epoch(params, x_train, y_train, learning_rate=config.learning_rate,
                           alpha=config.alpha, batch_size=config.batch_size, rng=rng)
        acc = accuracy(params, x_val, y_val)
        if not np.isfinite(loss):  # diverged: report it; Vertex marks the trial infeasible
            ctx.report(epoch, accuracy=acc, loss=loss, allow_nonfinite=True)
            break
        ctx.report(epoch, accuracy=acc, loss=loss)
        ctx.checkpoint(params, epoch)
    np.savez(os.path.join(ctx.model_dir, "model.npz"), **params)
    with open(os.path.join(ctx.model_dir, "model.json"), "w") as file:
        json.dump({"config": dataclasses.asdict(config), "accuracy": acc}, file, indent=2)
    return acc


if __name__ == "__main__":
    trials.main(objective, Config, spec=SPEC, **OPTIONS)
