"""The trainer of the job in journal.log: one flag in, its loss reported for two epochs."""

import argparse

import hypertune

parser = argparse.ArgumentParser()
parser.add_argument("--learning_rate", type=float, default=0.1)
args = parser.parse_args()
reporter = hypertune.HyperTune()
for epoch in (1, 2):
    reporter.report_hyperparameter_tuning_metric(
        hyperparameter_metric_tag="loss", metric_value=args.learning_rate / epoch, global_step=epoch)
