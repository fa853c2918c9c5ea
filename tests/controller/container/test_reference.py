"""Image references against the OCI/docker grammar (distribution/reference), checked before any runtime is asked."""

from __future__ import annotations

import json
import os
import stat

import pytest

from trials.controller.container import runtime as rt
from trials.controller.container.preflight import check_images
from trials.controller.container.reference import check_reference, is_reference
from trials.errors import ConfigError

DIGEST = "sha256:" + "0123456789abcdef" * 4

VALID = [
    "python", "python:3.11", "library/python:3.11-slim", "docker.io/library/python:3.11",
    "us-docker.pkg.dev/my-project/trainers/test-trainer:1", "localhost/trials-test-trainer:1",
    "localhost:5000/a/b", f"localhost/t@{DIGEST}", f"gcr.io/p/t:v1.2_rc-3@{DIGEST}", "[::1]:5000/x:y",
    "a__b/c.d/e---f", "Registry.Example.COM/lower/case", "844b723d550e", "t:" + "x" * 128,
]
INVALID = [
    "", "--help", "-v=/:/host", "-", "--network=host", "UPPER", "a/Upper", "a//b", "a/", "/a", "a:", "a@", "a:tag@",
    "a:-tag", "a:.tag", "a:" + "x" * 129, "a b", "a\nb", "a/b\n", "a:1 --privileged", "a@sha256:abc",
    "a@sha256:" + "g" * 64, "a..b", "a_-b", "_a", "a.", "héllo", "a" * 256, "host:port/a", "[::1/a",
]


@pytest.mark.parametrize("text", VALID)
def test_a_reference_of_the_grammar_is_accepted(text):
    assert is_reference(text) and check_reference(text, "somewhere") == text


@pytest.mark.parametrize("text", INVALID)
def test_anything_else_is_refused_in_one_line_naming_where_it_came_from(text):
    assert not is_reference(text)
    with pytest.raises(ConfigError) as err:
        check_reference(text, "trialJobSpec.workerPoolSpecs[0].containerSpec.imageUri")
    message = str(err.value)
    assert "\n" not in message and message.startswith("trialJobSpec.workerPoolSpecs[0].containerSpec.imageUri: ")
    assert "expected an image reference [HOST[:PORT]/]NAME[:TAG][@DIGEST]" in message
    assert message.endswith(f"got {text!r}") or "characters, at most 255" in message or "\\" in message


def _job(tmp_path, images):
    from trials.spec.load import load_spec

    pools = []
    for image in images:
        pool = ({"pythonPackageSpec": {"executorImageUri": image[1:], "packageUris": ["gs://b/p.tar.gz"],
                                       "pythonModule": "m"}} if image.startswith("!")
                else {"containerSpec": {"imageUri": image}})
        pools.append({"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1, **pool})
    body = {"studySpec": {"metrics": [{"metricId": "m", "goal": "MAXIMIZE"}],
                          "parameters": [{"parameterId": "x", "doubleValueSpec": {"minValue": 0, "maxValue": 1}}]},
            "maxTrialCount": 1, "parallelTrialCount": 1, "trialJobSpec": {"workerPoolSpecs": pools}}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(body))
    return load_spec(str(path))


def test_the_preflight_names_the_pool_and_asks_no_runtime(tmp_path):
    gone = rt.Runtime(name="podman", program=str(tmp_path / "no-such-runtime"))  # asked, it would fail otherwise
    job = _job(tmp_path, ["us-docker.pkg.dev/p/r/t:1", "--help"])
    with pytest.raises(ConfigError) as err:
        check_images(gone, job, {})
    assert not isinstance(err.value, rt.RuntimeUnavailable)
    assert str(err.value).startswith("trialJobSpec.workerPoolSpecs[1].containerSpec.imageUri: expected an image "
                                     "reference") and str(err.value).endswith("got '--help'")
    job = _job(tmp_path, ["!-q"])
    with pytest.raises(ConfigError, match=r"workerPoolSpecs\[0\]\.pythonPackageSpec\.executorImageUri: expected"):
        check_images(gone, job, {})
    job = _job(tmp_path, ["us-docker.pkg.dev/p/r/t:1"])
    with pytest.raises(ConfigError, match=r"^--image us-docker.pkg.dev/p/r/t:1=LOCAL: expected .* got '--rm'$"):
        check_images(gone, job, {"us-docker.pkg.dev/p/r/t:1": "--rm"})
    with pytest.raises(ConfigError, match=r"^--image a/b:1=LOCAL: expected .* got '-it'$"):
        rt.parse_image_map(["a/b:1=-it"])


def test_sweep_refuses_an_option_for_an_image_with_exit_2_before_podman_runs(tmp_path, monkeypatch, capsys):
    """The CLI's one line and exit code; a stand-in `podman` on PATH records whether anything asked it."""
    from trials.cli import main

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    asked = tmp_path / "asked"
    fake = bin_dir / "podman"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {asked}\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.chdir(tmp_path)
    _job(tmp_path, ["--help"])
    code = main(["sweep", str(tmp_path / "spec.json"), "--root", str(tmp_path / "jobs"), "--runtime", "podman"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "trialJobSpec.workerPoolSpecs[0].containerSpec.imageUri: expected an image reference" in err
    assert "got '--help'" in err
    assert not asked.exists() and not (tmp_path / "jobs").exists()
