"""CI: the fast part of the suite against the lowest versions pyproject.toml allows of the core dependencies.

    python .ci/lowest.py [VENV]        (default VENV: .ci/venv-lowest)

The constraints are read from pyproject.toml's own bounds (each `name>=X` of [project].dependencies pinned to
`name==X`), so a bound that is raised or lowered is what gets tested; the packages the fast tests import come
from the test extra, at the newest versions that go with those pins. Prints the versions it tested.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
FAST = "not integration and not faults and not postgres and not slurm and not long"
# What the fast tests import, from the test extra (the rest there: the SDK, storage emulator, browser: they skip)
TEST_PARTS = ("pytest", "pytest-xdist", "hypothesis", "scipy", "scikit-learn", "matplotlib", "greenlet", "cmaes",
              "psycopg2-binary")


def lowest_pins(pyproject: dict[str, object]) -> list[str]:
    """`name==X` for each `name>=X` core dependency; a dependency with no lower bound is refused."""
    project = pyproject["project"]
    assert isinstance(project, dict)
    pins = []
    for requirement in project["dependencies"]:
        match = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*>=\s*([^,\s]+)\s*(,.*)?", requirement)
        if match is None:
            raise SystemExit(f"lowest: pyproject.toml dependency {requirement!r} has no `>=` lower bound to test")
        pins.append(f"{match.group(1)}=={match.group(2)}")
    return pins


def test_requirements(pyproject: dict[str, object]) -> list[str]:
    project = pyproject["project"]
    assert isinstance(project, dict)
    extra = project["optional-dependencies"]["test"]
    wanted = []
    for requirement in extra:
        name = re.split(r"[<>=!~\s\[]", requirement, maxsplit=1)[0]
        if name in TEST_PARTS:
            wanted.append(requirement)
    return wanted


def main() -> int:
    venv = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / ".ci" / "venv-lowest")
    with open(ROOT / "pyproject.toml", "rb") as f:
        pyproject = tomllib.load(f)
    pins = lowest_pins(pyproject)
    constraints = venv.with_name(venv.name + "-constraints.txt")
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    constraints.write_text("\n".join(pins) + "\n")
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", str(constraints)]
    subprocess.run([*pip, "-e", str(ROOT), *test_requirements(pyproject)], check=True)
    versions = subprocess.run([python, "-c", "import importlib.metadata as m; print(', '.join(f'{n} {m.version(n)}' "
                               "for n in ('optuna', 'numpy', 'PyYAML', 'cloudml-hypertune', 'SQLAlchemy')))"],
                              capture_output=True, text=True, check=True).stdout.strip()
    print(f"lowest: the fast tests against {versions} (pinned: {', '.join(pins)})", flush=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIALS_REQUIRE_")}
    done = subprocess.run([python, "-m", "pytest", "-q", "-n", "4", "-p", "no:cacheprovider", "-m", FAST],
                          cwd=ROOT, env=env)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
