"""A trainer that ignores SIGTERM and always runs all its epochs: reports `loss` each epoch through
hypertune (--loss plus a decaying term, --sleep seconds per epoch), then saves its model."""

import argparse
import os
import signal
import time

import hypertune


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loss", type=float, required=True)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--sleep", type=float, default=0.15)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    reporter = hypertune.HyperTune()
    for epoch in range(1, args.epochs + 1):
        time.sleep(args.sleep)
        reporter.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag="loss", metric_value=args.loss + 1.0 / epoch, global_step=epoch)
    model_dir = os.environ["AIP_MODEL_DIR"]
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "model.txt"), "w") as f:
        f.write(f"{args.loss}\n")


if __name__ == "__main__":
    main()
