"""Gradient-boosted regression trees in numpy on scikit-learn's bundled diabetes data, as a trial.

Each boosting round adds one tree fitted to the residuals on a row subsample; every 10 rounds the
trial reports ``val_loss`` (validation MSE of the standardized target, minimize) and checkpoints
the ensemble, so a restarted trial resumes at the last checkpointed round. Tune it with
``trials sweep search_spaces/gbdt.yaml``; run it alone with ``python examples/gbdt/train.py``.
"""

from __future__ import annotations

import dataclasses
import gzip
import importlib.util
import json
import os

import numpy as np

import trials

SPEC = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                    os.pardir, "search_spaces", "gbdt.yaml"))
REPORT_EVERY = 10
N_BINS = 16


@dataclasses.dataclass(frozen=True)
class Config:
    n_estimators: int = 100
    max_depth: int = 3
    learning_rate: float = 0.1
    subsample: float = 0.8
    min_samples_leaf: int = 5
    seed: int = 0


def load_diabetes() -> tuple[np.ndarray, np.ndarray]:
    """442 patients x 10 features shipped inside scikit-learn, read without importing it."""
    found = importlib.util.find_spec("sklearn")
    if found is None or not found.submodule_search_locations:
        raise RuntimeError("this example reads data bundled with scikit-learn: pip install 'trials[examples]'")
    base = os.path.join(list(found.submodule_search_locations)[0], "datasets", "data")
    with gzip.open(os.path.join(base, "diabetes_data_raw.csv.gz"), "rt") as f:
        x = np.loadtxt(f)
    with gzip.open(os.path.join(base, "diabetes_target.csv.gz"), "rt") as f:
        y = np.loadtxt(f)
    x = (x - x.mean(0)) / x.std(0)
    y = (y - y.mean()) / y.std()
    return x, y


def bin_features(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    return np.stack([np.searchsorted(edges[j], x[:, j]) for j in range(x.shape[1])], axis=1)


def fit_tree(xb: np.ndarray, g: np.ndarray, depth: int, min_leaf: int) -> list:
    """A regression tree on binned features: nodes [feature, bin, left, right] or [-1, value]."""
    nodes: list = []

    def grow(rows: np.ndarray, level: int) -> int:
        index = len(nodes)
        nodes.append([-1, float(g[rows].mean())])
        if level == depth or len(rows) < 2 * min_leaf:
            return index
        best = (0.0, -1, -1)
        total, count = g[rows].sum(), len(rows)
        for j in range(xb.shape[1]):
            sums = np.bincount(xb[rows, j], weights=g[rows], minlength=N_BINS + 1)
            counts = np.bincount(xb[rows, j], minlength=N_BINS + 1)
            left_s, left_n = np.cumsum(sums)[:-1], np.cumsum(counts)[:-1]
            right_s, right_n = total - left_s, count - left_n
            ok = (left_n >= min_leaf) & (right_n >= min_leaf)
            if not ok.any():
                continue
            gain = np.where(ok, left_s ** 2 / np.maximum(left_n, 1) + right_s ** 2 / np.maximum(right_n, 1), 0)
            b = int(gain.argmax())
            if gain[b] - total ** 2 / count > best[0]:
                best = (gain[b] - total ** 2 / count, j, b)
        if best[1] < 0:
            return index
        _, j, b = best
        mask = xb[rows, j] <= b
        left = grow(rows[mask], level + 1)
        right = grow(rows[~mask], level + 1)
        nodes[index] = [j, b, left, right]
        return index

    grow(np.arange(len(g)), 0)
    return nodes


def predict_tree(nodes: list, xb: np.ndarray) -> np.ndarray:
    out = np.empty(len(xb))
    for i, row in enumerate(xb):
        k = 0
        while nodes[k][0] >= 0:
            j, b, left, right = nodes[k]
            k = left if row[j] <= b else right
        out[i] = nodes[k][1]
    return out


def objective(config: Config, ctx: trials.TrialContext) -> None:
    x, y = load_diabetes()
    order = np.random.default_rng(config.seed).permutation(len(y))
    val, train = order[:88], order[88:]
    edges = np.quantile(x[train], np.linspace(0, 1, N_BINS + 1)[1:-1], axis=0).T
    xb_train, xb_val = bin_features(x[train], edges), bin_features(x[val], edges)
    state = ctx.restore() or {"round": 0, "trees": []}
    pred_train = np.zeros(len(train))
    pred_val = np.zeros(len(val))
    for tree in state["trees"]:  # rebuild predictions of the restored ensemble
        pred_train += config.learning_rate * predict_tree(tree, xb_train)
        pred_val += config.learning_rate * predict_tree(tree, xb_val)
    rng = np.random.default_rng(config.seed + state["round"])
    for rnd in range(state["round"] + 1, config.n_estimators + 1):
        rows = rng.random(len(train)) < config.subsample
        residual = y[train] - pred_train
        tree = fit_tree(xb_train[rows], residual[rows], config.max_depth, config.min_samples_leaf)
        pred_train += config.learning_rate * predict_tree(tree, xb_train)
        pred_val += config.learning_rate * predict_tree(tree, xb_val)
        state["trees"].append(tree)
        state["round"] = rnd
        if rnd % REPORT_EVERY == 0 or rnd == config.n_estimators:
            ctx.report(rnd, val_loss=float(np.mean((y[val] - pred_val) ** 2)),
                       train_loss=float(np.mean((y[train] - pred_train) ** 2)))
            ctx.checkpoint(state, rnd)
            if ctx.should_stop:
                return
    with open(os.path.join(ctx.model_dir, "model.json"), "w") as f:
        json.dump({"config": dataclasses.asdict(config), "edges": edges.tolist(), "trees": state["trees"]}, f)


if __name__ == "__main__":
    trials.main(objective, Config, spec=SPEC)
