#!/usr/bin/env bash
# bench/transports.sh: the worker's two http1 transports (-transport goroutine and loop)
# side by side in one run: memory per idle keep-alive connection, and CPU per request of
# GET /health, of the heavy PATCH (32 KB answers: partial writes) and of the challenge's
# user journey at 64 and at 10,000 connections.
#
# Each measurement runs ROUNDS times, the transports interleaved, on a fresh copy of the
# seed: the worker alone (GOMAXPROCS=1) on SERVER_CPU, the client on LOAD_CPU.
#   - idle: VmRSS of the worker before and after IDLE_N connections that each made one
#     GET /health and then sit idle (bench/experiments/idlerss), per connection;
#   - health: `autocannon -c 64 -d DUR` on GET /health; the worker's utime+stime from
#     /proc/PID/stat over the run divided by the 2xx answers;
#   - patch: the same on `PATCH /api/resource/123` with the article's body
#     ({"foo1":"bar"}, Content-Type: application/json): ~31 KB answers;
#   - journey: bench/journey-cpu.sh with both transports as its WORKERS (64 users at time
#     scale 330 and 10,000 users at time scale 2: the same ~2,100 req/s).
# Compare rows of one run; the machine is shared, so quote medians and say it was noisy.
#
#   ROUNDS=3 bench/transports.sh
#   MEASURES=patch JOURNEY=0 ROUNDS=3 bench/transports.sh   # the heavy PATCH alone
#
# Needs bin/worker, bin/autocannon, bin/idlerss (`make build`; idlerss is in
# bench/experiments), data/seed.db and data/tokens.json (`make seed`), python3, and a
# descriptor limit above IDLE_N.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
IDLE_N=${IDLE_N:-10000}
DUR=${DUR:-8}
SERVER_CPU=${SERVER_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
PORT=${PORT:-3498}
TRANSPORTS=${TRANSPORTS:-"goroutine loop"}
JOURNEY=${JOURNEY:-1} # 0: skip the journey rows
MEASURES=${MEASURES:-"idle health patch"} # the per-round measures, in this order
# The secret that signed data/tokens.json (`make seed` makes data/jwt_secret), else the challenge's.
export JWT_SECRET=${JWT_SECRET:-$(cat data/jwt_secret 2>/dev/null || echo twelve-dollar-challenge)}
TICK=$(getconf CLK_TCK)
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
for b in worker autocannon idlerss; do
  [ -x "bin/$b" ] || { echo "bench/transports.sh: bin/$b is missing (see the header)" >&2; exit 1; }
done
[ -f data/seed.db ] && [ -f data/tokens.json ] || { echo "bench/transports.sh: run 'make seed' first" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)"

# One wrapper per transport, so journey-cpu.sh (which runs "$bin" and reads its /proc)
# starts the worker with it: exec keeps the pid.
for t in $TRANSPORTS; do
  printf '#!/bin/sh\nTRANSPORT=%s exec %s "$@"\n' "$t" "$PWD/bin/worker" >"$WORK/worker-$t"
  chmod +x "$WORK/worker-$t"
done

start() { # $1 transport; prints the pid once /health answers
  cp data/seed.db "$WORK/m.db"; rm -f "$WORK/m.db-wal" "$WORK/m.db-shm"
  SQLITE_PATH="$WORK/m.db" HOST=127.0.0.1 PORT=$PORT GOMAXPROCS=1 taskset -c "$SERVER_CPU" \
    "$WORK/worker-$1" -log-level warn >/dev/null 2>"$WORK/w.log" &
  local pid=$!
  for _ in $(seq 100); do
    bin/autocannon -c 1 -a 1 -n -j "http://127.0.0.1:$PORT/health" 2>/dev/null | grep -q '"2xx":1,' && break
    sleep 0.1
  done
  echo "$pid"
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

echo "# $(date -u +%FT%TZ) $(uname -r) $(nproc) cpus; worker cpu $SERVER_CPU, client cpu $LOAD_CPU; $ROUNDS rounds"
load() { # $1 measure name, $2 transport, $3 round, then autocannon's request arguments
  local name=$1 t=$2 r=$3
  shift 3
  pid=$(start "$t")
  taskset -c "$LOAD_CPU" bin/autocannon -c 64 -d 2 -n -j "$@" >/dev/null
  c0=$(ticks "$pid")
  taskset -c "$LOAD_CPU" bin/autocannon -c 64 -d "$DUR" -n -j "$@" >"$WORK/ac.json"
  c1=$(ticks "$pid")
  python3 - "$name" "$t" "$r" "$c0" "$c1" "$TICK" "$WORK/ac.json" <<'PY'
import json, sys
name, t, r, c0, c1, tick, path = sys.argv[1:]
j = json.load(open(path))
n = j["2xx"]
print(name + "_rps", t, r, round(n / j["duration"]), "req/s")
print(name + "_cpu", t, r, round((int(c1) - int(c0)) / int(tick) / n * 1e6, 2), "us/req")
PY
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

echo "measure transport round value unit"
for round in $(seq "$ROUNDS"); do
  for t in $TRANSPORTS; do
    for m in $MEASURES; do
      case $m in
      idle)
        pid=$(start "$t")
        line=$(taskset -c "$LOAD_CPU" bin/idlerss -pid "$pid" -n "$IDLE_N" -settle 3s "http://127.0.0.1:$PORT/health")
        echo "$line" | awk -v t="$t" -v r="$round" '{print "idle_rss_before", t, r, $4, "KB"; print "idle_rss_after", t, r, $6, "KB"; print "idle_per_conn", t, r, $8, "KB"}'
        kill "$pid"; wait "$pid" 2>/dev/null || true
        ;;
      health) load health "$t" "$round" "http://127.0.0.1:$PORT/health" ;;
      patch)
        load patch "$t" "$round" -m PATCH -H "Content-Type: application/json" -b '{"foo1":"bar"}' \
          "http://127.0.0.1:$PORT/api/resource/123"
        ;;
      *) echo "bench/transports.sh: unknown measure $m" >&2; exit 1 ;;
      esac
    done
  done
done
if [ "$JOURNEY" = 1 ]; then
  workers=""
  for t in $TRANSPORTS; do workers="$workers $t=$WORK/worker-$t"; done
  echo "# bench/journey-cpu.sh, WORKERS=\"$workers\" ROUNDS=$ROUNDS"
  WORKERS="$workers" ROUNDS=$ROUNDS SERVER_CPU=$SERVER_CPU LOAD_CPU=$LOAD_CPU bench/journey-cpu.sh
fi
