"""A PyTorch trainer as Vertex users write it (issue 51's benchmark, ``benchmarks/warm_start.py``).

argparse + hypertune, ``import torch, sklearn``: a small MLP (two hidden layers) on scikit-learn's bundled digits (8x8
images; 70 % train, 30 % validation, standardised), Adam, mini-batches of 8, the validation accuracy
reported through hypertune after every epoch. Seeded (``--seed``, default 0), so one parameter set
gives the same values in every process that runs it with the same number of threads::

    python torch_digits.py --learning_rate=0.01 --hidden=64 --epochs=12

:func:`train` is the training itself, for the benchmark's in-process variants (plain Optuna and
``trials.tune``), which call it as a user's objective would.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import hypertune
import sklearn  # noqa: F401 - imported as the users' trainers do (its datasets, model_selection, preprocessing)
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

BATCH_SIZE = 8


def data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x_train, y_train, x_val, y_val) as tensors: 1,257 / 540 images."""
    x, y = load_digits(return_X_y=True)
    x_tr, x_val, y_tr, y_val = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
    scaler = StandardScaler().fit(x_tr)
    return (torch.tensor(scaler.transform(x_tr), dtype=torch.float32), torch.tensor(y_tr),
            torch.tensor(scaler.transform(x_val), dtype=torch.float32), torch.tensor(y_val))


def train(learning_rate: float, hidden: int, epochs: int, seed: int = 0) -> Iterator[float]:
    """Yield the validation accuracy after each epoch."""
    torch.manual_seed(seed)
    x_tr, y_tr, x_val, y_val = data()
    model = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                                torch.nn.ReLU(), torch.nn.Linear(hidden, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)  # (the first one imports torch._dynamo)
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(y_tr))
        for start in range(0, len(order), BATCH_SIZE):
            idx = order[start:start + BATCH_SIZE]
            optimizer.zero_grad()
            loss = loss_fn(model(x_tr[idx]), y_tr[idx])
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            yield float((model(x_val).argmax(dim=1) == y_val).float().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--learning_rate", type=float, default=0.01)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    ht = hypertune.HyperTune()
    for epoch, accuracy in enumerate(train(args.learning_rate, args.hidden, args.epochs, args.seed), start=1):
        print(f"epoch {epoch}: accuracy {accuracy:.4f}", flush=True)
        ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="accuracy", metric_value=accuracy,
                                               global_step=epoch)


if __name__ == "__main__":
    main()
