"""A trainer written the way Vertex users write them (argparse + cloudml-hypertune) that replays a recorded
learning curve: the curve of the recorded configuration nearest its flags, one report per epoch, a small
sleep per epoch (``--sleep_s``) standing in for the training. Recorded by ``benchmarks/record_curves.py``.

``python replay_curve.py --curves benchmarks/data/curves_digits.json --learning_rate=0.05 --hidden_units=64 ...``
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any


def nearest(grid: dict[str, Any], point: dict[str, float]) -> int:
    """The index (``itertools.product`` order) of the recorded configuration nearest ``point``: per axis the
    nearest value, on a log scale where the axis has one (the grid is a product: per axis is the nearest)."""
    index = 0
    for name, values in grid["axes"].items():
        scale = (lambda v: math.log(max(float(v), 1e-300))) if grid["scale"].get(name) == "log" else float
        want = scale(point[name])
        k = min(range(len(values)), key=lambda i: abs(scale(values[i]) - want))
        index = index * len(values) + k
    return index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--curves", required=True)
    parser.add_argument("--sleep_s", type=float, default=0.01)
    known, rest = parser.parse_known_args(argv)
    with open(known.curves, encoding="utf-8") as f:
        grid = json.load(f)
    for name in grid["axes"]:
        parser.add_argument(f"--{name}", type=float, required=True)
    args = parser.parse_args(argv)
    import hypertune

    hpt = hypertune.HyperTune()
    curve = grid["curves"][nearest(grid, {n: getattr(args, n) for n in grid["axes"]})]
    for epoch, value in enumerate(curve, start=1):
        time.sleep(args.sleep_s)
        hpt.report_hyperparameter_tuning_metric(hyperparameter_metric_tag=grid["metric"], metric_value=value,
                                                global_step=epoch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
