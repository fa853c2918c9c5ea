"""Real containers: podman, a Debian base image made without a registry (``.ci/run`` builds it), the
hypertune layer on it, and the test trainer image built here from ``image/``.

Where podman or the base image is missing the tests skip, unless ``TRIALS_REQUIRE_CONTAINERS=1``
(``.ci/run`` sets it): then they fail, so CI never passes by skipping them. This machine's settings
(no rlimit raises, runc on hybrid cgroups) are applied when a first container says it needs them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from containerkit import BASE, HERE, HYPERTUNE, TRAINER


def _unavailable(why: str) -> None:
    if os.environ.get("TRIALS_REQUIRE_CONTAINERS") == "1":
        pytest.fail(f"containers are required here (TRIALS_REQUIRE_CONTAINERS=1): {why}")
    pytest.skip(why)


@pytest.fixture(scope="session")
def container_env(tmp_path_factory) -> dict[str, str]:
    """The environment `trials --runtime podman` runs in here (this machine's settings if it needs them)."""
    from trials.controller.container import runtime as rt

    if shutil.which("podman") is None:
        _unavailable("podman is not installed")
    env = dict(os.environ)
    runtime = rt.find("podman", env)
    if not runtime.image_exists(BASE):
        _unavailable(f"no base image {BASE} (.ci/run builds it with mmdebstrap)")
    try:
        runtime.check_starts(BASE)
    except rt.RuntimeUnavailable:  # this machine kind: no rlimit raises, hybrid cgroups
        conf = tmp_path_factory.mktemp("containers") / "containers.conf"
        conf.write_text("[containers]\ndefault_ulimits = []\n")
        env["CONTAINERS_CONF"] = str(conf)
        env[rt.ENV_GLOBAL_ARGS] = "--runtime runc --cgroup-manager=cgroupfs"
        runtime = rt.find("podman", env)
        runtime.check_starts(BASE)
    os.environ.update({k: v for k, v in env.items() if k in ("CONTAINERS_CONF", rt.ENV_GLOBAL_ARGS)})
    if not runtime.image_exists(HYPERTUNE):
        build = runtime.call("build", "--network=host", "-t", HYPERTUNE, "--build-arg", f"BASE={BASE}",
                             "-v", "/etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro",
                             str(HERE.parent.parent / ".ci" / "images" / "hypertune"), timeout=600, env=env)
        if build.returncode != 0:
            _unavailable(f"could not build {HYPERTUNE}: {build.stderr.decode(errors='replace')[-300:]}")
    build = runtime.call("build", "-t", TRAINER, "--build-arg", f"BASE={HYPERTUNE}", str(HERE / "image"),
                         timeout=300, env=env)
    assert build.returncode == 0, build.stderr.decode(errors="replace")
    return env


@pytest.fixture(scope="session")
def sdist(tmp_path_factory) -> Path:
    """The test package as a source distribution (a tar.gz of setup.py and the package)."""
    out = tmp_path_factory.mktemp("sdist") / "trainerpkg-0.1.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(HERE / "package", arcname="trainerpkg-0.1",
                filter=lambda info: None if "__pycache__" in info.name else info)
    return out


@pytest.fixture(scope="session")
def docker_env(container_env) -> dict[str, str]:
    """The environment for `--runtime docker` (a running daemon; the test image copied from podman's store)."""
    from trials.controller.container import runtime as rt

    if shutil.which("docker") is None:
        _docker_unavailable("docker is not installed")
    env = {k: v for k, v in container_env.items() if k != rt.ENV_GLOBAL_ARGS}  # podman's options are not docker's
    docker = rt.find("docker", env)
    if docker.call("info", "--format", "{{.ServerVersion}}", timeout=30).returncode != 0:
        _docker_unavailable("no docker daemon answers")
    podman = rt.find("podman", container_env)

    def image_id(runtime: rt.Runtime) -> str:
        out = runtime.call("image", "inspect", "--format", "{{.Id}}", TRAINER)
        return out.stdout.decode().strip().removeprefix("sha256:") if out.returncode == 0 else ""

    if image_id(docker) != image_id(podman):  # missing, or older than the image just built
        save = subprocess.Popen([*podman.command, "save", TRAINER], stdout=subprocess.PIPE, env=container_env)
        load = subprocess.run([docker.program, "load", "-q"], stdin=save.stdout, capture_output=True, timeout=300)
        save.wait()
        assert load.returncode == 0, load.stderr
    return env


def _docker_unavailable(why: str) -> None:
    if os.environ.get("TRIALS_REQUIRE_DOCKER") == "1":
        pytest.fail(f"docker is required here (TRIALS_REQUIRE_DOCKER=1): {why}")
    pytest.skip(why)
