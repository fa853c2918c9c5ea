"""What a journal sweep loads: nothing only a database job or a container needs (sqlalchemy alone
cost ~0.2-0.4 s of every sweep's start-up before its first trial)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

NOT_FOR_A_JOURNAL_SWEEP = ("sqlalchemy", "trials.study.database.leases", "trials.study.database.outages",
                           "trials.study.journal_check", "trials.controller.container.runtime")

TRAINER = """
import hypertune
hypertune.HyperTune().report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag="score", metric_value=1.0, global_step=1)
"""

SPEC = """\
metrics: {score: maximize}
parameters:
  x: {type: double, min: 0, max: 1}
max_trial_count: 2
"""


def test_a_journal_sweep_never_imports_the_database_layer_or_the_readers(tmp_path):
    (tmp_path / "train.py").write_text(TRAINER)
    (tmp_path / "spec.yaml").write_text(SPEC)
    program = textwrap.dedent(f"""
        import json, sys
        from trials.cli import main
        code = main(["sweep", "spec.yaml", "--root", "jobs", "--quiet", "--", sys.executable, "train.py"])
        print(json.dumps({{"code": code, "loaded": [m for m in {NOT_FOR_A_JOURNAL_SWEEP!r} if m in sys.modules]}}))
    """)
    done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"code": 0, "loaded": []}, done.stderr
