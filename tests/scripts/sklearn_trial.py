"""A real scikit-learn trainer as a new user writes it: the estimator itself is the checkpoint.

Prints ``resumed at <step>`` when it restored a checkpoint, so a test can see the restart resume.
"""

import dataclasses

import numpy as np
from sklearn.linear_model import SGDClassifier

import trials


@dataclasses.dataclass(frozen=True)
class Config:
    alpha: float = 1e-4
    epochs: int = 3


def objective(config, ctx):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 4))
    y = (x[:, 0] + x[:, 1] > 0).astype(int)
    clf = ctx.restore()
    if clf is None:
        clf = SGDClassifier(alpha=config.alpha, random_state=0)
    else:
        print(f"resumed at {ctx.restored_step} after {clf.t_:.0f} updates", flush=True)
    for epoch in ctx.steps(config.epochs):
        clf.partial_fit(x, y, classes=[0, 1])
        ctx.report(epoch, accuracy=float(clf.score(x, y)))
        ctx.checkpoint(clf, epoch)
    return None


if __name__ == "__main__":
    trials.main(objective, Config)
