#!/usr/bin/env bash
# Make sure the local PostgreSQL server answers on 127.0.0.1:5432 (database `test`) for the
# scale-out tests: start it if it is down, wait for it, and fail loudly if it cannot come up.
set -euo pipefail

HOST=127.0.0.1
PORT=5432
DB=${TRIALS_CI_POSTGRES_DB:-test}

if [ -n "${TRIALS_TEST_POSTGRES_URL:-}" ]; then
  echo "postgres: using TRIALS_TEST_POSTGRES_URL (not starting a local server)"
  exit 0
fi
if ! command -v pg_isready >/dev/null || [ ! -d /etc/postgresql ]; then
  echo "postgres: FAILED: PostgreSQL is not installed here (no pg_isready or /etc/postgresql)" >&2
  exit 1
fi
if ! pg_isready -q -h "$HOST" -p "$PORT"; then
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  echo "postgres: server down; starting cluster $version/main"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
fi
for _ in $(seq 1 60); do
  if pg_isready -q -h "$HOST" -p "$PORT"; then
    break
  fi
  sleep 0.5
done
if ! pg_isready -q -h "$HOST" -p "$PORT"; then
  echo "postgres: FAILED: no server accepting connections on $HOST:$PORT after 30 s" >&2
  pg_lsclusters >&2 || true
  exit 1
fi
# The tests use database $DB; create it when a fresh cluster lacks it.
if ! psql -h "$HOST" -p "$PORT" -U postgres -d "$DB" -Atc "SELECT 1" >/dev/null 2>&1; then
  createdb -h "$HOST" -p "$PORT" -U postgres "$DB"
fi
echo "postgres: ready on $HOST:$PORT, database $DB"
