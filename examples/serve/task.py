"""The trainer of docs/API_SERVER.md's snippet: what a Vertex AI tuning job's container runs.

It takes its hyperparameter as a flag (``--learning_rate=0.01``, as Vertex appends it), trains a
small logistic regression on a synthetic problem for ``--epochs`` epochs, and reports ``accuracy``
after each one through cloudml-hypertune. Standard library and ``cloudml-hypertune`` only.

    python examples/serve/task.py --learning_rate=0.05 --epochs=10
"""

import argparse
import math
import random

import hypertune


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--learning_rate", type=float, required=True)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    rng = random.Random(a.seed)
    data = []
    for _ in range(400):  # two Gaussian blobs
        label = rng.random() < 0.5
        data.append(((rng.gauss(1.0 if label else -1.0, 1.2), rng.gauss(0.5 if label else -0.5, 1.2)), label))
    w = [0.0, 0.0, 0.0]
    ht = hypertune.HyperTune()
    for epoch in range(1, a.epochs + 1):
        for (x1, x2), y in data:
            z = max(-30.0, min(30.0, w[0] + w[1] * x1 + w[2] * x2))
            g = 1 / (1 + math.exp(-z)) - y
            w = [w[0] - a.learning_rate * g, w[1] - a.learning_rate * g * x1, w[2] - a.learning_rate * g * x2]
        correct = sum((w[0] + w[1] * x1 + w[2] * x2 > 0) == y for (x1, x2), y in data)
        ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="accuracy", metric_value=correct / len(data),
                                               global_step=epoch)
        print(f"epoch {epoch}: accuracy {correct / len(data):.3f}")


if __name__ == "__main__":
    main()
