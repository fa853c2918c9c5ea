"""A trainer's raw stderr (ESC sequences, OSC title, BEL, NUL, invalid UTF-8) never reaches a terminal,
an HTML page or a JSON document unescaped: progress lines, summary, describe, report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))
from faultkit import Jobs  # noqa: E402

pytestmark = [pytest.mark.faults]

HOSTILE = b"\x1b[2J\x1b]0;pwned\x07\x00\xff\xfe BOOM\x1b[31m \xe2\x80\xae fake\x1b[0m end"
TRAINER = f"""\
import sys
sys.stderr.buffer.write(b"starting\\n" + {HOSTILE!r} + b"\\n")
sys.stderr.flush()
sys.exit(1)
"""
RAW = ("\x1b", "\x07", "\x00", "\u202e", "\r")


@pytest.fixture
def jobs(tmp_path: Path):
    j = Jobs(tmp_path)
    yield j
    j.cleanup()


def _clean(text: str, where: str) -> None:
    for ch in RAW:
        assert ch not in text, f"{ch!r} reached {where} raw: {text!r}"


@pytest.mark.parametrize("mode", [[], ["--json-logs"]], ids=["plain", "json-logs"])
def test_a_trainers_control_characters_are_escaped_everywhere(jobs: Jobs, mode: list[str]) -> None:
    trainer = jobs.root / "hostile.py"
    trainer.write_text(TRAINER)
    job_id = jobs.job_id("esc")
    out = jobs.cli("sweep", jobs.spec(n=1, max_failed=1), "--job-id", job_id, *mode, "--",
                   sys.executable, str(trainer))
    assert out.returncode == 1, out.stdout + out.stderr
    _clean(out.stdout + out.stderr, "the sweep's output")
    assert "\\x1b[2J\\x1b]0;pwned\\x07\\x00" in out.stdout.replace("\\\\", "\\"), out.stdout
    table = jobs.cli("describe", job_id)
    assert table.returncode == 0, table.stderr
    _clean(table.stdout, "the describe table")
    assert "BOOM" in table.stdout
    csv = jobs.cli("describe", job_id, "--format", "csv")
    _clean(csv.stdout, "the describe CSV")
    described = jobs.cli("describe", job_id, "--format", "json").stdout
    _clean(json.dumps(json.loads(described), ensure_ascii=False), "the describe JSON")
    report = jobs.cli("report", job_id, "--no-plots")
    assert report.returncode == 0, report.stderr
    page = (jobs.job_dir(job_id) / "report" / "index.html").read_text()
    _clean(page, "the HTML report")
    assert "\\x1b[2J" in page


TAG_TRAINER = """\
import json, os, time
line = {"loss": "0.5", "acc\\u001b]0;pwned\\u0007\\u001b[2J": "0.9", "global_step": "1", "timestamp": time.time()}
with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "w") as f:
    f.write(json.dumps(line) + "\\n")
"""


def test_a_metric_tag_with_control_characters_is_escaped_in_warnings_and_describe(jobs: Jobs) -> None:
    trainer = jobs.root / "tags.py"
    trainer.write_text(TAG_TRAINER)
    job_id = jobs.job_id("esctag")
    out = jobs.cli("sweep", jobs.spec(n=1), "--job-id", job_id, "--", sys.executable, str(trainer))
    assert out.returncode == 0, out.stdout + out.stderr
    _clean(out.stdout + out.stderr, "the sweep's output")
    assert "acc\\x1b]0;pwned\\x07" in out.stdout + out.stderr, out.stdout + out.stderr
    for fmt in ("table", "csv", "json"):
        shown = jobs.cli("describe", job_id, "--format", fmt)
        assert shown.returncode == 0, shown.stderr
        _clean(shown.stdout, f"describe --format {fmt}")


ECHO_TRAINER = f"""\
import json, os, sys, time
out = sys.stdout.buffer
out.write(b"plain text\\twith a tab, caf\\xc3\\xa9\\n" + {HOSTILE!r} + b"\\n")
out.write(b"progress 10%\\rprogress 100%\\r\\n")
out.flush()
sys.stderr.buffer.write(b"err \\x1b]0;title\\x07 \\x00\\n")
sys.stderr.flush()
with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "w") as f:
    f.write(json.dumps({{"loss": "0.5", "global_step": "1", "timestamp": time.time()}}) + "\\n")
"""


def test_echo_escapes_control_characters_and_keeps_text_and_tabs(jobs: Jobs) -> None:
    trainer = jobs.root / "echo.py"
    trainer.write_text(ECHO_TRAINER)
    job_id = jobs.job_id("echo")
    out = jobs.cli("sweep", jobs.spec(n=1), "--job-id", job_id, "--echo", "--", sys.executable, str(trainer))
    assert out.returncode == 0, out.stdout + out.stderr
    _clean(out.stdout + out.stderr, "the --echo output")
    lines = out.stdout.splitlines()
    assert "[1/workerpool0-0] plain text\twith a tab, café" in lines, out.stdout
    assert ("[1/workerpool0-0] \\x1b[2J\\x1b]0;pwned\\x07\\x00\ufffd\ufffd BOOM\\x1b[31m \\u202e fake\\x1b[0m end"
            in lines), out.stdout
    assert "[1/workerpool0-0] progress 100%" in lines, out.stdout  # what a terminal ends up showing
    assert "[1/workerpool0-0] err \\x1b]0;title\\x07 \\x00" in lines, out.stdout
    log = jobs.job_dir(job_id) / "1" / "workerpool0-0.stdout.log"
    assert HOSTILE in log.read_bytes()  # the log keeps the trainer's bytes as they were
