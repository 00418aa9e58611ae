#!/usr/bin/env bash
# Start the machine's PostgreSQL 15 (Debian) and create the test role and a fresh test database.
# Used by .ci/run and `make postgres`; needs root. Prints the URL the tests read.
set -euo pipefail

if ! command -v pg_ctlcluster >/dev/null; then
  echo "PostgreSQL is not installed: apt-get install postgresql" >&2
  exit 1
fi
pg_lsclusters | grep -Eq '^15 +main .*online' || pg_ctlcluster 15 main start
for _ in $(seq 50); do
  su postgres -c "pg_isready -q" && break
  sleep 0.2
done
su postgres -c "psql -v ON_ERROR_STOP=1 -q" <<'SQL'
SELECT 'CREATE ROLE specdec LOGIN PASSWORD ''specdec'''
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'specdec') \gexec
DROP DATABASE IF EXISTS specdec_test WITH (FORCE);
CREATE DATABASE specdec_test OWNER specdec;
SQL
echo "postgresql+psycopg://specdec:specdec@127.0.0.1:5432/specdec_test"
