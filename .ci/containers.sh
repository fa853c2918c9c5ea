#!/usr/bin/env bash
# podman, runc and a registry-free base image for the container tests (see ../shared/reference/containers.md):
#   localhost/trials-debpy:1      Debian bookworm with python3, pip and venv (mmdebstrap, imported)
#   localhost/trials-hypertune:1  a venv with cloudml-hypertune on it (.ci/images/hypertune)
# Cached in $TRIALS_CI_CACHE (default /var/cache/trials-ci): the tar and the images are made once.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${TRIALS_CI_CACHE:-/var/cache/trials-ci}
mkdir -p "$CACHE"
start=$(date +%s)
if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v mmdebstrap >/dev/null; then
  if [ "$(id -u)" != 0 ]; then echo "containers: podman/runc/mmdebstrap missing and not root"; exit 1; fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc mmdebstrap >/dev/null
fi
# docker (the daemon from Debian's docker.io) for the docker test: installed and started here if none answers.
if [ "$(id -u)" = 0 ]; then
  if ! command -v dockerd >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null 2>&1 ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null; } ||
      echo "containers: docker.io could not be installed: the docker test skips"
  fi
  if command -v dockerd >/dev/null && ! docker info >/dev/null 2>&1; then
    (dockerd >"$CACHE/dockerd.log" 2>&1 &)
    for _ in $(seq 1 30); do docker info >/dev/null 2>&1 && break; sleep 1; done
  fi
fi
# An ordinary user for the rootless test (useradd gives it its subuid/subgid ranges).
if [ "$(id -u)" = 0 ] && ! id trials-rootless >/dev/null 2>&1; then
  useradd --create-home trials-rootless
fi
# This machine kind's settings (a normal workstation needs neither): no rlimit raises, runc on hybrid cgroups.
printf '[containers]\ndefault_ulimits = []\n' > "$CACHE/containers.conf"
export CONTAINERS_CONF="$CACHE/containers.conf"
P=(podman --runtime runc --cgroup-manager=cgroupfs)
if ! "${P[@]}" image exists localhost/trials-debpy:1; then
  if [ ! -f "$CACHE/debpy.tar" ]; then
    mmdebstrap --quiet --variant=apt --include=python3,python3-pip,python3-venv bookworm "$CACHE/debpy.tmp.tar" \
      http://deb.debian.org/debian
    mv "$CACHE/debpy.tmp.tar" "$CACHE/debpy.tar"
  fi
  "${P[@]}" import --quiet "$CACHE/debpy.tar" localhost/trials-debpy:1 >/dev/null
fi
if ! "${P[@]}" image exists localhost/trials-hypertune:1; then
  "${P[@]}" build --quiet --network=host \
    -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
    -t localhost/trials-hypertune:1 .ci/images/hypertune >/dev/null
fi
echo "containers: podman $(podman --version | awk '{print $3}'), images ready in $(( $(date +%s) - start )) s"
