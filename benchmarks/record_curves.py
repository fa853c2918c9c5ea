"""Record real learning curves once, over a grid, for the combined benchmark (part 12): ``python -m
benchmarks.record_curves [digits|gbdt ...]`` writes ``benchmarks/data/curves_<workload>.json``.

- ``digits``: the numpy MLP of ``examples/digits_mlp/train.py`` (its own functions, its data split and seed)
  on scikit-learn's bundled digits, validation accuracy after each of 20 epochs, over learning rate x hidden
  units x L2 penalty x batch size (5 x 4 x 3 x 4 = 240 configurations);
- ``gbdt``: scikit-learn's GradientBoostingClassifier on its bundled breast-cancer data (80/20 split,
  seed 0), validation log loss every 5 of 100 boosting rounds (``staged_predict_proba``: the rounds of one
  fit), over learning rate x max depth x subsample x min samples per leaf (5 x 4 x 3 x 3 = 180).

A file holds the grid's axes (with each axis' scale, how the replay finds the nearest configuration), the
metric and its direction, and one curve per configuration in ``itertools.product`` order of the axes,
values to 5 significant digits. The replay (``benchmarks/trainers/replay_curve.py``) reads them.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from typing import Any

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

GRIDS: dict[str, dict[str, Any]] = {
    "digits": {
        "metric": "accuracy", "maximize": True, "epochs": 20,
        "axes": {"learning_rate": [0.003, 0.01, 0.03, 0.1, 0.3], "hidden_units": [16, 32, 64, 128],
                 "alpha": [1e-6, 1e-4, 1e-2], "batch_size": [16, 32, 64, 128]},
        "scale": {"learning_rate": "log", "hidden_units": "log", "alpha": "log", "batch_size": "log"},
    },
    "gbdt": {
        "metric": "log_loss", "maximize": False, "epochs": 20,  # one step = 5 boosting rounds
        "axes": {"learning_rate": [0.01, 0.03, 0.1, 0.3, 1.0], "max_depth": [1, 2, 3, 5],
                 "subsample": [0.5, 0.8, 1.0], "min_samples_leaf": [1, 5, 20]},
        "scale": {"learning_rate": "log", "max_depth": "linear", "subsample": "linear", "min_samples_leaf": "log"},
    },
}


def _digits_module() -> Any:
    import importlib.util

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("digits_example", os.path.join(root, "examples", "digits_mlp",
                                                                                  "train.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["digits_example"] = module  # (its dataclass looks its module up)
    spec.loader.exec_module(module)
    return module


def digits_curve(m: Any, data: tuple[Any, ...], point: dict[str, Any], epochs: int) -> list[float]:
    """The example's own training loop (``train`` without its context): accuracy after each epoch."""
    import numpy as np

    x_train, y_train, x_val, y_val = data
    params = m.init_params(x_train.shape[1], int(point["hidden_units"]), 0)
    out = []
    for epoch in range(1, epochs + 1):
        rng = np.random.default_rng([0, epoch])
        loss = m.train_epoch(params, x_train, y_train, learning_rate=point["learning_rate"], alpha=point["alpha"],
                             batch_size=int(point["batch_size"]), rng=rng)
        out.append(m.accuracy(params, x_val, y_val) if np.isfinite(loss) else 0.0)
    return out


def gbdt_curve(data: tuple[Any, ...], point: dict[str, Any], epochs: int) -> list[float]:
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.metrics import log_loss

    x_train, y_train, x_val, y_val = data
    model = GradientBoostingClassifier(n_estimators=5 * epochs, learning_rate=point["learning_rate"],
                                       max_depth=int(point["max_depth"]), subsample=point["subsample"],
                                       min_samples_leaf=int(point["min_samples_leaf"]), random_state=0)
    model.fit(x_train, y_train)
    staged = list(model.staged_predict_proba(x_val))
    return [float(log_loss(y_val, staged[5 * k - 1], labels=[0, 1])) for k in range(1, epochs + 1)]


def record(workload: str) -> str:
    grid = GRIDS[workload]
    names = list(grid["axes"])
    if workload == "digits":
        m = _digits_module()
        x, y = m.load_digits()
        data = m.split(x, y, 0.2, 0)
        with m.one_blas_thread():
            curves = [digits_curve(m, data, dict(zip(names, p, strict=True)), grid["epochs"])
                      for p in itertools.product(*grid["axes"].values())]
    else:
        from sklearn.datasets import load_breast_cancer
        from sklearn.model_selection import train_test_split

        x, y = load_breast_cancer(return_X_y=True)
        x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
        data = (x_train, y_train, x_val, y_val)
        curves = [gbdt_curve(data, dict(zip(names, p, strict=True)), grid["epochs"])
                  for p in itertools.product(*grid["axes"].values())]
    out = {"workload": workload, **grid, "curves": [[float(f"{v:.5g}") for v in c] for c in curves]}
    os.makedirs(DATA, exist_ok=True)
    path = os.path.join(DATA, f"curves_{workload}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    os.replace(path + ".tmp", path)
    return path


def main(argv: list[str] | None = None) -> int:
    for workload in (argv if argv is not None else sys.argv[1:]) or list(GRIDS):
        t = time.perf_counter()
        path = record(workload)
        print(f"{workload}: {path} ({time.perf_counter() - t:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
