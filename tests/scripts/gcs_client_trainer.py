"""A plain trainer that builds a google-cloud-storage client, implicitly (the anti-pattern) or with
``--explicit`` (project from CLOUD_ML_PROJECT_ID, as Vertex asks)."""

import argparse
import json
import os

import hypertune
from google.cloud import storage

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float)
p.add_argument("--explicit", action="store_true")
a = p.parse_args()
try:
    client = storage.Client(project=os.environ["CLOUD_ML_PROJECT_ID"]) if a.explicit else storage.Client()
except Exception as err:  # no credentials here: what matters is how the project was chosen
    print(json.dumps({"severity": "WARNING", "message": f"no client: {type(err).__name__}"}))
h = hypertune.HyperTune()
for step in range(1, 4):
    h.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="accuracy", metric_value=0.5, global_step=step)
