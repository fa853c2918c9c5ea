"""A trainer in the AI Platform pattern: trains, reports its metric once at global_step=1000, then saves
its model (slowly, as an upload would be) to $AIP_MODEL_DIR. Flags: --loss (the value it reports),
--save_s (seconds the model save takes)."""

import argparse
import os
import time

import hypertune


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loss", type=float, required=True)
    parser.add_argument("--save_s", type=float, default=1.0)
    args = parser.parse_args()
    hypertune.HyperTune().report_hyperparameter_tuning_metric(
        hyperparameter_metric_tag="loss", metric_value=args.loss, global_step=1000)
    time.sleep(args.save_s)  # the upload: a SIGTERM now loses the model
    model_dir = os.environ["AIP_MODEL_DIR"]
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "model.txt"), "w") as f:
        f.write(f"{args.loss}\n")


if __name__ == "__main__":
    main()
