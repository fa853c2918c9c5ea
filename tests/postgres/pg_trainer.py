"""A trainer for the scale-out tests: checkpoints each epoch, logs start/end events, reports `score`."""

import argparse
import json
import os
import time
from pathlib import Path

import hypertune

p = argparse.ArgumentParser()
p.add_argument("--x", type=float, default=0.5)
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--sleep", type=float, default=0.1)
p.add_argument("--events", required=True)
p.add_argument("--gate", default=None, help="a file: epochs after --gate-epoch wait until it exists")
p.add_argument("--gate-epoch", type=int, default=1)
a = p.parse_args()

trial = os.environ["CLOUD_ML_TRIAL_ID"]
ckpt_dir = os.environ["AIP_CHECKPOINT_DIR"]
os.makedirs(ckpt_dir, exist_ok=True)
ckpt = os.path.join(ckpt_dir, "epoch.txt")
start = int(Path(ckpt).read_text()) if os.path.exists(ckpt) else 0


def event(kind, **extra):
    line = json.dumps({"trial": trial, "event": kind, "t": time.time(), "pid": os.getpid(), **extra})
    with open(a.events, "a") as f:  # one short O_APPEND write per line: lines never interleave
        f.write(line + "\n")


event("start", from_epoch=start, x=a.x, gpus=os.environ.get("CUDA_VISIBLE_DEVICES"))
ht = hypertune.HyperTune()
for epoch in range(start + 1, a.epochs + 1):
    while a.gate and epoch > a.gate_epoch and not os.path.exists(a.gate):
        time.sleep(0.05)  # the test holds the trial here until what it checks has happened
    time.sleep(a.sleep)
    ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="score",
                                           metric_value=1.0 - (a.x - 0.3) ** 2 + 0.01 * epoch,
                                           global_step=epoch)
    with open(ckpt + ".tmp", "w") as f:
        f.write(str(epoch))
    os.replace(ckpt + ".tmp", ckpt)
    event("epoch", epoch=epoch)
event("end")
