"""A trials.main trainer with typed choices; writes RAN into its model dir when the objective runs."""

import dataclasses
import os
from typing import Literal

import trials


@dataclasses.dataclass(frozen=True)
class Config:
    alpha: float = 1e-4
    optimizer: Literal["adam", "sgd"] = "adam"
    hidden: int = 32
    epochs: int = 3


def objective(config, ctx):
    with open(os.path.join(ctx.model_dir, "RAN"), "w") as f:
        f.write("the objective ran")
    for step in ctx.steps(config.epochs):
        ctx.report(step, accuracy=0.5 + 0.1 * step)


if __name__ == "__main__":
    trials.main(objective, Config)
