"""A plain Vertex-style trainer: argparse flags in, cloudml-hypertune metric out; no `trials` import.

`--data` is required (argparse lists it without brackets in its usage), `--verbose` is a switch.
"""

import argparse

import hypertune


def main():
    parser = argparse.ArgumentParser(description="a trainer as most Vertex users write one")
    parser.add_argument("--learning_rate", type=float, default=0.1, help="step size")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("-d", "--data", required=True, help="where the training data is")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    reporter = hypertune.HyperTune()
    for epoch in range(1, args.epochs + 1):
        reporter.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag="loss", metric_value=args.learning_rate / epoch, global_step=epoch)


if __name__ == "__main__":
    main()
