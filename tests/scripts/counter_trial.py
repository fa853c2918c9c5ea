"""A tiny real trial: counts epochs, reports, checkpoints each epoch; knobs for fault tests.

Flags: --epochs, --learning_rate, --sleep_s (per epoch, spent in small slices so a signal lands
mid-epoch), --fail_at (raise at that step), --ignore_stop (never look at should_stop).
"""

import dataclasses
import time

import trials


@dataclasses.dataclass(frozen=True)
class Config:
    learning_rate: float = 0.1
    epochs: int = 5
    sleep_s: float = 0.0
    fail_at: int = 0
    ignore_stop: bool = False


def objective(config, ctx):
    state = ctx.restore({"value": 0.0, "epochs_done": 0})
    step = ctx.start_step
    while step <= config.epochs:
        if not config.ignore_stop and ctx.should_stop:
            break
        deadline = time.monotonic() + config.sleep_s
        while time.monotonic() < deadline:
            time.sleep(0.005)
        if step == config.fail_at:
            raise RuntimeError(f"failing at step {step} as asked")
        state = {"value": state["value"] + config.learning_rate, "epochs_done": step}
        ctx.report(step, score=state["value"], epoch=step)
        ctx.checkpoint(state, step)
        step += 1
    with open(f"{ctx.model_dir}/model.json", "w") as f:
        f.write(str(state["value"]))
    return None


if __name__ == "__main__":
    trials.main(objective, Config)
