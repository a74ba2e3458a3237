#!/usr/bin/env bash
# Makes sure PostgreSQL answers on 127.0.0.1:5432 (installing and starting it
# when it is not there) and creates a fresh, empty test database; prints its
# URL. Each test then works in a task hub (a schema) of its own inside it.
set -euo pipefail
HOST=127.0.0.1
PORT=5432
DB=${1:-agenthost_test}

up() { pg_isready -q -h "$HOST" -p "$PORT" 2>/dev/null; }

if ! up; then
    echo "PostgreSQL is not answering on $HOST:$PORT: starting it" >&2
    if ! command -v pg_ctlcluster >/dev/null 2>&1; then
        apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    fi
    for version in $(ls /etc/postgresql 2>/dev/null); do
        pg_ctlcluster "$version" main start >&2 || true
    done
    for _ in $(seq 1 30); do up && break; sleep 1; done
    up || { echo "PostgreSQL did not start on $HOST:$PORT" >&2; exit 1; }
fi

psql -q -h "$HOST" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 \
    -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >&2
echo "postgres://postgres@$HOST:$PORT/$DB"
