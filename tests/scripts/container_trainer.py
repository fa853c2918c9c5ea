"""A trainer written for a Vertex container: env dump, relative writes, /gcs outputs, --job-dir.

Every run writes ``seen.json`` in its trial folder: the environment, the working folder, what it
found in ``out.txt`` after writing its own trial id there, and where it saved its model. Reports
``score`` through hypertune.
"""

import argparse
import json
import os
import time

try:
    import hypertune
except ImportError:  # run by a system python (the unprivileged test): write what hypertune writes
    hypertune = None

p = argparse.ArgumentParser()
p.add_argument("--x", type=float, default=0.5)
p.add_argument("--job-dir", dest="job_dir")
p.add_argument("--need-job-dir", action="store_true")
p.add_argument("--sleep", type=float, default=0.0)
p.add_argument("--tag", default="score")
p.add_argument("--gcs-model", action="store_true", help="save model.txt under /gcs from AIP_MODEL_DIR")
a = p.parse_args()
if a.need_job_dir and not a.job_dir:
    p.error("the following arguments are required: --job-dir")

trial = os.environ["CLOUD_ML_TRIAL_ID"]
with open("out.txt", "w") as f:  # a relative write, as many real trainers do
    f.write(trial)
time.sleep(a.sleep)  # parallel trials overlap here
with open("out.txt") as f:
    found = f.read()
model = None
if a.gcs_model:
    model_dir = os.environ["AIP_MODEL_DIR"].replace("gs://", "/gcs/", 1)
    os.makedirs(model_dir, exist_ok=True)
    model = os.path.join(model_dir, "model.txt")
    with open(model, "w") as f:
        f.write(f"model of trial {trial}")
seen = {"env": dict(os.environ), "cwd": os.getcwd(), "found": found, "job_dir": a.job_dir,
        "model": model}
with open(os.path.join(os.environ["TRIALS_TRIAL_DIR"], "seen.json"), "w") as f:
    json.dump(seen, f)
value = 1.0 - (a.x - 0.3) ** 2
if hypertune is not None:
    hypertune.HyperTune().report_hyperparameter_tuning_metric(
        hyperparameter_metric_tag=a.tag, metric_value=value, global_step=1)
else:
    with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "w") as f:
        f.write(json.dumps({"timestamp": time.time(), "trial": trial, a.tag: str(value), "global_step": "1",
                            "checkpoint_path": ""}) + "\n")
