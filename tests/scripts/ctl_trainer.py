"""A trainer for controller tests: reports `score` per epoch via hypertune; misbehaves on request."""

import argparse
import json
import os
import sys
import time

import hypertune

p = argparse.ArgumentParser()
p.add_argument("--x", type=float, default=0.5)
p.add_argument("--n", type=int, default=1)
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--sleep", type=float, default=0.01)
p.add_argument("--mode", default="ok")
a = p.parse_args()

replica = os.environ.get("TRIALS_REPLICA", "workerpool0-0")
attempt = int(os.environ.get("TRIALS_ATTEMPT", "0"))
trial_dir = os.environ.get("TRIALS_TRIAL_DIR", ".")
primary = replica == "workerpool0-0"
with open(os.path.join(trial_dir, f"seen-{replica}-{attempt}.json"), "w") as f:
    json.dump({"argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items()
               if k.startswith(("CLOUD_ML_", "AIP_", "TRIALS_")) or k in
               ("CLUSTER_SPEC", "TF_CONFIG", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")},
               "start": time.time(), "pid": os.getpid()}, f)

if not primary:
    if a.mode == "worker_hang":
        time.sleep(60)
    sys.exit(0)

if a.mode == "worker_hang":  # the workers hang once started: wait until every replica has started
    deadline = time.time() + 60
    world = int(os.environ.get("WORLD_SIZE", "1"))
    while time.time() < deadline and sum(name.startswith("seen-") for name in os.listdir(trial_dir)) < world:
        time.sleep(0.05)

ht = hypertune.HyperTune()
for epoch in range(1, a.epochs + 1):
    time.sleep(a.sleep)
    score = 1.0 - (a.x - 0.3) ** 2 - 0.01 * a.n + 0.01 * epoch
    ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="score", metric_value=score, global_step=epoch)
    if a.mode == "crash_once" and attempt == 0 and epoch == 2:
        sys.exit(3)
    if a.mode == "crash_always" and epoch == 2:
        sys.exit(3)
if a.mode == "error":
    raise ValueError(f"bad x {a.x}")
if a.mode == "oom":
    block = bytearray(400 * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(10)
if a.mode == "hang":
    time.sleep(60)
with open(os.path.join(trial_dir, f"end-{replica}.json"), "w") as f:
    json.dump({"end": time.time()}, f)
