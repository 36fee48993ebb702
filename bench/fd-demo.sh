#!/usr/bin/env bash
# bench/fd-demo.sh: the $6-server article's file-descriptor lesson, reproduced. CONNS (300)
# keep-alive connections at once, from bench/experiments/connprobe, against:
#   1. nginx front.conf with worker_connections 64 (the article's 768, scaled to the load);
#   2. nginx front.conf with worker_connections 16384 but worker_rlimit_nofile 128: the
#      article's "Too many open files";
#   3. nginx front.conf with the limits configs/nginx sets, which should be clean;
#   4. our worker alone under a hard descriptor limit of 256 (prlimit), no nginx.
# For each it prints what the clients saw (answers by status, connections closed or reset,
# requests with no answer within 2 s, connections never answered) and the server's own log
# lines about it. The server is pinned to SERVER_CPU (1), the clients to LOAD_CPU (0).
#
# Needs: nginx, prlimit, taskset, go, bin/worker, data/seed.db (`make build seed`).
set -euo pipefail
cd "$(dirname "$0")/.."

CONNS=${CONNS:-300}
SERVER_CPU=${SERVER_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
DUR=${DUR:-5}
PATH_=${PATH_:-/posts/1}
WORKER=${WORKER:-bin/worker}   # the worker binary
export JWT_SECRET=${JWT_SECRET:-twelve-dollar-challenge}
WORK=$(mktemp -d)
WPORT=${WPORT:-3471}
NPORT=${NPORT:-8471}
pids=()
cleanup() {
  NGINX_PREFIX="$WORK/nginx" configs/nginx/nginx.sh stop >/dev/null 2>&1 || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

for t in prlimit taskset; do command -v $t >/dev/null || { echo "bench/fd-demo.sh: $t is missing" >&2; exit 1; }; done
[ -x "$WORKER" ] && [ -f data/seed.db ] || { echo "bench/fd-demo.sh: run 'make build seed' first" >&2; exit 1; }

cp data/seed.db "$WORK/feed.db"
go build -C bench/experiments -o "$WORK/connprobe" ./connprobe

start_worker() { # $@: a command prefix (prlimit ...); sets wpid
  SQLITE_PATH="$WORK/feed.db" HOST=127.0.0.1 PORT=$WPORT "$@" taskset -c "$SERVER_CPU" "$WORKER" >/dev/null 2>"$WORK/worker.log" &
  wpid=$!; pids+=("$wpid")
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$WPORT/health" >/dev/null 2>&1 && return; sleep 0.1; done
  echo "worker did not start:" >&2; cat "$WORK/worker.log" >&2; exit 1
}

stop_worker() { kill "$wpid"; wait "$wpid" 2>/dev/null || true; }

load() { # $1 = base URL; prints what the clients saw
  taskset -c "$LOAD_CPU" "$WORK/connprobe" -c "$CONNS" -d "${DUR}s" -timeout 2s "$1$PATH_" | sed 's/^/    clients: /'
}

nginx_run() { # $1 = title; env: WORKER_CONNECTIONS, RLIMIT_NOFILE
  echo "## $1"
  rm -rf "$WORK/nginx"
  NGINX_PREFIX="$WORK/nginx" NGINX_PORT=$NPORT UPSTREAM=127.0.0.1:$WPORT WORKER_PROCESSES=1 \
    taskset -c "$SERVER_CPU" configs/nginx/nginx.sh start front >/dev/null 2>&1
  echo "    limits: $(grep -oE '^ *(worker_connections|worker_rlimit_nofile) [0-9]+' "$WORK/nginx/front.conf" | xargs), $CONNS connections"
  load "http://127.0.0.1:$NPORT"
  NGINX_PREFIX="$WORK/nginx" configs/nginx/nginx.sh stop >/dev/null
  # One example of each distinct message, with its count (the timestamps and ids differ).
  sed -E 's/^[0-9\/]+ [0-9:]+ //; s/[0-9]+#[0-9]+: (\*[0-9]+ )?//; s/, client: .*//' "$WORK/nginx/error.log" |
    sort | uniq -c | sort -rn | head -6 | sed 's/^ */    nginx error.log: x/'
  echo
}

start_worker
WORKER_CONNECTIONS=64 RLIMIT_NOFILE=4096 nginx_run "nginx, worker_connections 64"
WORKER_CONNECTIONS=16384 RLIMIT_NOFILE=128 nginx_run "nginx, worker_rlimit_nofile 128"
WORKER_CONNECTIONS=16384 RLIMIT_NOFILE="" nginx_run "nginx, the limits configs/nginx sets"
stop_worker

echo "## our worker alone, prlimit --nofile=256:256"
start_worker prlimit --nofile=256:256
echo "    limits: soft and hard RLIMIT_NOFILE 256, $CONNS connections"
load "http://127.0.0.1:$WPORT"
# internal/http1 logs running out of descriptors at most once a second, with the limits.
grep -m1 '"nofile_soft"' "$WORK/worker.log" | sed 's/^/    worker log: /' || true
echo "    worker log: $(grep -c '"nofile_soft"' "$WORK/worker.log" || true) such lines in ${DUR}s"
stop_worker
