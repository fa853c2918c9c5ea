"""A pythonPackageSpec trainer: installed from its sdist in the job's bucket, run as python -m trainerpkg.task."""

import argparse

import hypertune

p = argparse.ArgumentParser()
p.add_argument("--x", type=float, required=True)
a = p.parse_args()
hypertune.HyperTune().report_hyperparameter_tuning_metric(hyperparameter_metric_tag="score", metric_value=a.x * 2,
                                                          global_step=1)
print("trainerpkg ran from", __file__)
