"""Benchmark trial: EPOCHS epochs of WORK_MS of CPU busy loop, one hypertune report per epoch.

Flags: ``--epochs=N`` ``--work-ms=MS`` (``--sleep-ms=MS``: epochs that wait instead, as a trainer
waiting on a GPU or on I/O does) and any ``--name=value`` hyperparameters (the numeric ones
feed the reported score). When ``BENCH_TIMES`` is set, one line ``<trial id> <start> <end>`` (wall clock,
seconds) is appended to that file at exit so the benchmark can see when the process really ran.
"""

import time

T0 = time.time()

import os  # noqa: E402
import sys  # noqa: E402

import hypertune  # noqa: E402


def main(argv: list[str]) -> int:
    epochs, work_s, sleep_s, params = 10, 0.02, 0.0, {}
    for arg in argv:
        if not arg.startswith("--") or "=" not in arg:
            continue
        name, value = arg[2:].split("=", 1)
        if name == "epochs":
            epochs = int(value)
        elif name == "work-ms":
            work_s = float(value) / 1000
        elif name == "sleep-ms":
            sleep_s = float(value) / 1000
        else:
            try:
                params[name] = float(value)
            except ValueError:
                params[name] = float(len(value))
    target = sum((v - 0.3) ** 2 for v in params.values())
    ht = hypertune.HyperTune()
    for epoch in range(1, epochs + 1):
        end = time.process_time() + work_s
        while time.process_time() < end:
            pass
        if sleep_s:
            time.sleep(sleep_s)
        ht.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag="score", metric_value=-target * (1 + 1 / epoch), global_step=epoch)
    path = os.environ.get("BENCH_TIMES")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        trial = os.environ.get("CLOUD_ML_TRIAL_ID", "0")
        os.write(fd, f"{trial} {T0:.6f} {time.time():.6f}\n".encode())
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
