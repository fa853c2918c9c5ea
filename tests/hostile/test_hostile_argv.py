"""Hostile values reach a real trial verbatim, one argv token each; no shell ever sees them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]

TRAINER = str(Path(__file__).resolve().parent.parent / "scripts" / "fault_trainer.py")
EVIL = [
    "a\nb",
    "$(touch pwned-subst)",
    "; touch pwned-semicolon",
    "`touch pwned-backtick`",
    "|| touch pwned-or",
    "> pwned-redirect",
    "../../x",
    "a=b c",
    "--fault=crash",
    "' \" \\",
    "*",
    "\ttab",
    "ジョブ\u202e",
    "  leading and trailing  ",
]
PWNED = ("pwned-subst", "pwned-semicolon", "pwned-backtick", "pwned-or", "pwned-redirect", "pwned-local",
         "pwned-arg")


def test_categorical_values_and_ids_arrive_as_single_verbatim_tokens(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    (home / "sentinel").write_text("still here")
    spec = work / "evil.yaml"
    spec.write_text(
        "metrics: {loss: minimize}\n"
        "parameters:\n"
        f"  evil: {{type: categorical, values: {json.dumps(EVIL, ensure_ascii=False)}}}\n"
        "  λ: {type: categorical, values: [x y]}\n"
        '  "a=b": {type: discrete, values: [1]}\n'
        "algorithm: grid\n"
        f"max_trial_count: {len(EVIL)}\nparallel_trial_count: 2\n"
        f"command: [python, {TRAINER}]\n"
        'args: [--fault=argv, --epochs=1, "$(touch pwned-arg)"]\n',
        encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUD_ML_", "AIP_", "TRIALS_"))}
    env["HOME"] = str(home)
    out = subprocess.run([sys.executable, "-m", "trials", "sweep", str(spec), "--job-id", "evil",
                          "--grace-period", "1", "--", "python", TRAINER, "$(touch pwned-local)",
                          "--fault=argv", "--epochs=1"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr

    job = work / "trials-jobs" / "evil"
    seen = []
    for trial_dir in sorted((p for p in job.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        argv = json.loads((trial_dir / "argv.json").read_text(encoding="utf-8"))
        # the local command's arguments, then the spec's args, then one flag per parameter
        assert argv[:3] == ["$(touch pwned-local)", "--fault=argv", "--epochs=1"]
        assert argv[3:6] == ["--fault=argv", "--epochs=1", "$(touch pwned-arg)"]
        flags = argv[6:]
        assert flags[1:] == ["--λ=x y", "--a=b=1"], flags
        assert flags[0].startswith("--evil=")
        seen.append(flags[0][len("--evil="):])
        recorded = json.loads((trial_dir / "args.json").read_text(encoding="utf-8"))
        assert recorded["replicas"]["workerpool0-0"][-len(argv):] == argv
    assert sorted(seen) == sorted(EVIL), "every value arrived once, byte for byte"

    everything = [p.name for p in tmp_path.rglob("*")]
    assert not [name for name in everything if name.startswith("pwned")], "a shell interpreted a value"
    assert not (work / "x").exists() and not (tmp_path / "x").exists()
    assert (home / "sentinel").read_text() == "still here"
    trial_dirs = {p.name for p in job.iterdir() if p.is_dir()}
    assert trial_dirs <= {str(i) for i in range(1, len(EVIL) + 1)} | {"gcs"}, trial_dirs
