"""Benchmark learning curve: a numpy MLP on scikit-learn's bundled digits data, one epoch at a time.

numpy only: the data file is read from the installed scikit-learn package without importing it
(``<sklearn>/datasets/data/digits.csv.gz``). As a script it is a trial: ``--learning_rate=…``
``--hidden=…`` ``--batch_size=…`` ``--weight_decay=…`` ``--momentum=…`` ``--epochs=N``, reporting
validation accuracy through hypertune every epoch.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping

import numpy as np

N_VALIDATION = 500
DATA_SEED = 0
_DATA: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None


def digits_path() -> str:
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("scikit-learn is not installed: its bundled digits.csv.gz is the data set")
    return os.path.join(list(spec.submodule_search_locations)[0], "datasets", "data", "digits.csv.gz")


def load_digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_val, y_val): 1,297 / 500 images of 8x8 pixels scaled to [0, 1]."""
    global _DATA
    if _DATA is None:
        data = np.loadtxt(digits_path(), delimiter=",", dtype=np.float32)
        x, y = data[:, :-1] / 16.0, data[:, -1].astype(np.int64)
        order = np.random.default_rng(DATA_SEED).permutation(len(y))
        val, train = order[:N_VALIDATION], order[N_VALIDATION:]
        _DATA = (x[train], y[train], x[val], y[val])
    return _DATA


def train(params: Mapping[str, float], *, epochs: int, seed: int = 0) -> Iterator[float]:
    """Yield the validation accuracy after each epoch of SGD with momentum and weight decay."""
    x_tr, y_tr, x_val, y_val = load_digits()
    lr = float(params["learning_rate"])
    hidden = int(params["hidden"])
    batch = int(params["batch_size"])
    decay = float(params["weight_decay"])
    momentum = float(params["momentum"])
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((64, hidden)) * np.sqrt(2 / 64)).astype(np.float32)
    b1 = np.zeros(hidden, np.float32)
    w2 = (rng.standard_normal((hidden, 10)) * np.sqrt(1 / hidden)).astype(np.float32)
    b2 = np.zeros(10, np.float32)
    weights = [w1, b1, w2, b2]
    velocity = [np.zeros_like(w) for w in weights]
    onehot = np.eye(10, dtype=np.float32)
    with np.errstate(all="ignore"):  # a diverging learning rate gives NaN weights: accuracy shows it
        for _ in range(epochs):
            order = rng.permutation(len(y_tr))
            for start in range(0, len(order), batch):
                idx = order[start:start + batch]
                xb, yb = x_tr[idx], onehot[y_tr[idx]]
                h = np.maximum(xb @ w1 + b1, 0)
                logits = h @ w2 + b2
                logits -= logits.max(axis=1, keepdims=True)
                p = np.exp(logits)
                p /= p.sum(axis=1, keepdims=True)
                g_logits = (p - yb) / len(idx)
                g_h = (g_logits @ w2.T) * (h > 0)
                grads = [xb.T @ g_h + decay * w1, g_h.sum(0), h.T @ g_logits + decay * w2, g_logits.sum(0)]
                for w, v, g in zip(weights, velocity, grads, strict=False):
                    v *= momentum
                    v -= lr * g
                    w += v
            scores = np.maximum(x_val @ w1 + b1, 0) @ w2 + b2
            yield float(np.mean(np.argmax(scores, axis=1) == y_val))


def main(argv: list[str]) -> int:
    params: dict[str, float] = {}
    epochs = 20
    for arg in argv:
        if arg.startswith("--") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            if name == "epochs":
                epochs = int(value)
            else:
                params[name] = float(value)
    import hypertune

    ht = hypertune.HyperTune()
    seed = int(os.environ.get("CLOUD_ML_TRIAL_ID", "0") or 0)
    for epoch, accuracy in enumerate(train(params, epochs=epochs, seed=seed), start=1):
        ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="accuracy", metric_value=accuracy,
                                               global_step=epoch)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
