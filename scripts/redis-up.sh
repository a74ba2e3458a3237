#!/usr/bin/env bash
# Makes sure Redis answers on 127.0.0.1:6379 (installing redis-server with apt
# and starting it when it is not there); prints its URL. The streaming tests
# use it, and start private redis-server processes of their own.
set -euo pipefail
HOST=127.0.0.1
PORT=6379

up() { redis-cli -h "$HOST" -p "$PORT" ping 2>/dev/null | grep -q PONG; }

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    echo "installing redis-server" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >&2
fi
if ! up; then
    echo "Redis is not answering on $HOST:$PORT: starting it" >&2
    redis-server --bind "$HOST" --port "$PORT" --daemonize yes --save '' --appendonly no >&2
    for _ in $(seq 1 30); do up && break; sleep 0.2; done
    up || { echo "Redis did not start on $HOST:$PORT" >&2; exit 1; }
fi
echo "redis://$HOST:$PORT"
