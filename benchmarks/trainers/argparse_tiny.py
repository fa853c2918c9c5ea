"""A tiny trainer as users write them: argparse flags, a few epochs of CPU busy loop, one hypertune
report per epoch (``--epochs``, ``--work-ms``, ``--x``, ``--y``). When ``BENCH_TIMES`` is set, one line
``<trial id> <start> <end>`` (wall clock) is appended to that file at exit."""

import time

T0 = time.time()

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import hypertune  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--work-ms", type=float, default=50.0)
    parser.add_argument("--x", type=float, default=0.5)
    parser.add_argument("--y", type=float, default=0.5)
    args = parser.parse_args(argv)
    ht = hypertune.HyperTune()
    for epoch in range(1, args.epochs + 1):
        end = time.process_time() + args.work_ms / 1000
        while time.process_time() < end:
            pass
        score = -((args.x - 0.3) ** 2 + (args.y - 0.3) ** 2) * (1 + 1 / epoch)
        ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="score", metric_value=score,
                                               global_step=epoch)
    path = os.environ.get("BENCH_TIMES")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, f"{os.environ.get('CLOUD_ML_TRIAL_ID', '0')} {T0:.6f} {time.time():.6f}\n".encode())
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
