"""A ``trials.main`` trainer that returns a variable initialised before its loop.

It reports ``accuracy`` each epoch and checkpoints; on attempt 0 it exits 3 (a crash the job
restarts) right after its last checkpoint, so the restarted attempt restores the last step, trains
no step and returns ``{"accuracy": 0.0}``, the value from before the loop.
"""

import dataclasses
import os

import trials


@dataclasses.dataclass(frozen=True)
class Config:
    x: float = 0.5
    epochs: int = 10


def objective(config, ctx):
    state = ctx.restore({"w": 0.0})
    accuracy = 0.0
    for step in ctx.steps(config.epochs):
        state = {"w": state["w"] + 0.05 + config.x / 100}
        accuracy = state["w"]
        ctx.report(step, accuracy=accuracy)
        ctx.checkpoint(state, step)
        if step == config.epochs and ctx.attempt == 0:
            os._exit(3)  # interrupted right after the last checkpoint
    return {"accuracy": accuracy}


if __name__ == "__main__":
    trials.main(objective, Config)
