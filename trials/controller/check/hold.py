"""Where `trials check`'s SIGTERM lands: a Python trainer held after its k-th report until it arrived.

The restart probe interrupts a run after k of the clean run's n reports. The job loop reads the
metric file every pass (tens of milliseconds); a trainer without a pause between its epochs reports
them all in less, so the signal would land at its end and test nothing. The probe's
``sitecustomize`` (next to the identity audit's) therefore holds the trainer, when the controller
asks, as it is about to write its metric file once it holds k reports of the metric: the loop reads
those k, sends SIGTERM, and on its next pass the probe writes the release file. The trainer's own
SIGTERM handler runs while it waits (a handler that raises ends the wait as it would end any call);
the report in hand is then written, as any report after a SIGTERM would be. A trainer that is not
Python, or starts its interpreter without ``sitecustomize``, is not held: the loop's poll decides,
and a run that ends first is said to be too fast to interrupt.
"""

from __future__ import annotations

import json
import os
import stat

from trials import files

HOLD_ENV = "TRIALS_CHECK_HOLD"  # JSON: {"metric_file", "tag", "after", "release", "max_s"}
RELEASE_FILE = "release"  # in the audit folder: written by the probe once SIGTERM was sent


def hold_env(*, metric_file: str, tag: str, after: int, release: str, max_s: float) -> str:
    """The value of ``HOLD_ENV``: hold before the write that follows ``after`` reports of ``tag`` in
    ``metric_file``, until ``release`` exists or ``max_s`` seconds passed."""
    return json.dumps({"metric_file": metric_file, "tag": tag, "after": after, "release": release,
                       "max_s": max_s})


def release(path: str) -> None:
    """End the hold (a trainer that still waits goes on); never through a link the trainer planted."""
    if not path:
        return
    try:
        if stat.S_ISDIR(os.lstat(os.path.dirname(path)).st_mode) and not os.path.lexists(path):
            files.write_text_atomic(path, "released\n")
    except OSError:  # the trial folder is the trainer's too: the hold ends after its max_s anyway
        pass


SITECUSTOMIZE_HOLD = r'''
"""Written by `trials check`: holds the trainer after report k until the probe's SIGTERM landed."""
import os
import sys


def _install_hold():
    raw = os.environ.get("TRIALS_CHECK_HOLD")
    if not raw:
        return
    import json
    import time

    try:
        config = json.loads(raw)
        target = os.path.abspath(config["metric_file"])
        tag, after, release = str(config["tag"]), int(config["after"]), str(config["release"])
        max_s = float(config["max_s"])
    except (ValueError, KeyError, TypeError):
        return
    state = {"busy": False, "done": False}
    writing = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC

    def reported():
        """How many reports of the metric the file holds now (its own reads are not held)."""
        n = 0
        try:
            with open(target, encoding="utf-8", errors="replace") as f:
                for line in f:
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    n += isinstance(record, dict) and tag in record
        except OSError:
            pass
        return n

    def due(event, args):
        if state["done"] or state["busy"] or event != "open" or not args or isinstance(args[0], int):
            return False
        mode = args[1] if len(args) > 1 else None
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        if not (isinstance(mode, str) and any(c in mode for c in "wax+")) and not flags & writing:
            return False
        if os.path.abspath(os.fsdecode(args[0])) != target:
            return False
        state["busy"] = True
        try:
            return reported() >= after
        finally:
            state["busy"] = False

    def hook(event, args):
        try:
            hold = due(event, args)
        except Exception:  # an audit hook that raises would make the trainer's own call fail
            return
        if not hold:
            return
        state["done"] = True
        deadline = time.monotonic() + max_s
        # SIGTERM's handler runs during a sleep; what it raises ends the wait (and the trainer's call)
        while time.monotonic() < deadline and not os.path.lexists(release):
            time.sleep(0.01)

    sys.addaudithook(hook)


_install_hold()
del _install_hold
'''
