"""The ``trials`` command ends without the interpreter's teardown, losing nothing: the exit code,
the atexit handlers (a cgroup folder removed, orphans swept) and buffered output are kept."""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
import atexit, sys, threading, time
import trials.cli
atexit.register(lambda: print("atexit ran", flush=False))
sys.stdout.write("buffered, no newline")
if len(sys.argv) > 1:  # a thread still running: the normal exit, which waits for it
    threading.Thread(target=lambda: (time.sleep(0.3), print(" thread done"))).start()
trials.cli.exit_now(3)
print("never")
"""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROGRAM, *args], capture_output=True, text=True, timeout=60)


def test_exit_now_keeps_the_code_the_atexit_handlers_and_buffered_output():
    done = _run()
    assert done.returncode == 3
    assert done.stdout == "buffered, no newlineatexit ran\n"


def test_exit_now_with_a_thread_still_running_exits_the_normal_way():
    done = _run("thread")
    assert done.returncode == 3
    assert "thread done" in done.stdout and "atexit ran" in done.stdout and "never" not in done.stdout


def test_python_m_trials_exits_with_the_commands_code():
    done = subprocess.run([sys.executable, "-m", "trials", "no-such-command"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "invalid choice" in done.stderr


def test_a_profiled_command_still_writes_its_profile(tmp_path):
    out = tmp_path / "cli.prof"
    done = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), "-m", "trials", "list", "--root",
                           str(tmp_path / "jobs")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert out.exists() and out.stat().st_size > 0
