"""A trainer whose steps wait on files, so a test arranges the order of events instead of sleeping.

``gated_trainer.py DIR``: each trial reports ``loss`` at step 1 (cloudml-hypertune's file format),
creates ``DIR/reported-<trial id>``, then follows ``DIR/plan-<trial id>`` if the test wrote one
(JSON: ``wait_for``: a file name in DIR to wait for, ``exit``: the exit status, default 0), reports
step 2 and exits with that status.
"""
import json
import os
import sys
import time


def report(step, trial_id):
    line = {"loss": str(0.5 / step), "global_step": str(step), "timestamp": time.time(),
            "trial": trial_id, "checkpoint_path": ""}
    with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def main():
    folder = sys.argv[1]
    trial_id = os.environ["CLOUD_ML_TRIAL_ID"]
    report(1, trial_id)
    open(os.path.join(folder, f"reported-{trial_id}"), "w").close()
    plan = {}
    path = os.path.join(folder, f"plan-{trial_id}")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            plan = json.load(f)
    if plan.get("wait_for"):
        target = os.path.join(folder, plan["wait_for"])
        while not os.path.exists(target):
            time.sleep(0.01)
    code = int(plan.get("exit", 0))
    if code:
        print(f"trial {trial_id}: failing on purpose", file=sys.stderr)
        return code
    report(2, trial_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
