"""A report with a step beyond the storage's 32-bit range is refused with a warning, in PostgreSQL and
in the journal alike; the job goes on and both storages hold the same measurements."""

from __future__ import annotations

import json
import subprocess
import sys

TRAINER = """\
import json, os, time
with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "w") as f:
    for step, loss in ((1, 0.5), (2, 0.4), (3000000000, 0.3), (3, 0.2)):
        f.write(json.dumps({"loss": str(loss), "global_step": str(step), "timestamp": time.time()}) + "\\n")
"""
SPEC = "metrics: {loss: minimize}\nparameters:\n  x: {type: double, min: 0, max: 1}\nmax_trial_count: 2\n"


def _run(tmp_path, *argv):
    return subprocess.run([sys.executable, "-m", "trials", *argv], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)


def test_a_step_beyond_the_storage_range_is_refused_alike_in_postgres_and_the_journal(tmp_path, pg_url, job_id):
    (tmp_path / "t.py").write_text(TRAINER)
    (tmp_path / "s.yaml").write_text(SPEC)
    measured = {}
    for name, storage in (("postgres", ["--storage", pg_url]), ("journal", [])):
        jid = f"{job_id}{name[0]}"
        out = _run(tmp_path, "sweep", "s.yaml", "--job-id", jid, "--seed", "1", *storage, "--",
                   sys.executable, "t.py")
        assert out.returncode == 0, out.stdout + out.stderr
        warned = [line for line in (out.stdout + out.stderr).splitlines()
                  if "step 3000000000 is beyond the storage's range (0..2147483647)" in line]
        assert len(warned) == 2, out.stdout + out.stderr  # one per trial
        rest = json.loads(_run(tmp_path, "describe", jid, *storage, "--format", "json").stdout)
        assert [t["state"] for t in rest["trials"]] == ["SUCCEEDED"] * 2
        measured[name] = [[(m["stepCount"], m["metrics"][0]["value"]) for m in t["measurements"]]
                          for t in rest["trials"]]
    assert measured["postgres"] == measured["journal"]
    assert measured["journal"][0] == [("1", 0.5), ("2", 0.4), ("3", 0.2)]
