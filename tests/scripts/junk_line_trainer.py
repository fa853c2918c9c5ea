"""A trainer that writes its metric file itself: step 1, one junk line, step 3 (then exits 0).

``--file=hypertune`` writes ``CLOUD_ML_HP_METRIC_FILE`` (cloudml-hypertune's line format),
``--file=jsonl`` the trial's ``metrics.jsonl`` (the runtime's format). ``--junk-mb`` MiB of junk
without a newline come between the two reports; ``--sparse`` makes them a hole of NUL bytes (no
disk space used, still read as bytes).
"""
import json
import os
import sys
import time


def flag(name, default):
    prefix = f"--{name}="
    return next((a[len(prefix):] for a in sys.argv[1:] if a.startswith(prefix)), default)


def line(kind, step, loss):
    if kind == "hypertune":
        return json.dumps({"loss": str(loss), "global_step": str(step), "timestamp": time.time(),
                           "trial": os.environ.get("CLOUD_ML_TRIAL_ID", ""), "checkpoint_path": ""})
    return json.dumps({"step": step, "timestamp": time.time(), "metrics": {"loss": loss}, "attempt": 0})


def main():
    kind = flag("file", "hypertune")
    junk = int(float(flag("junk-mb", "8")) * (1 << 20))
    path = (os.environ["CLOUD_ML_HP_METRIC_FILE"] if kind == "hypertune"
            else os.path.join(os.environ["TRIALS_TRIAL_DIR"], "metrics.jsonl"))
    with open(path, "w", encoding="utf-8") as f:
        f.write(line(kind, 1, 0.5) + "\n")
        if flag("sparse", "0") == "1":
            f.flush()
            f.truncate(f.tell() + junk)
            f.seek(0, os.SEEK_END)
        else:
            block = "{junk" * (1 << 16)  # 320 KiB of JSON-looking junk
            left = junk
            while left > 0:
                f.write(block[:left])
                left -= len(block)
        f.write("\n" + line(kind, 3, 0.25) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
