#!/usr/bin/env bash
# bench/clientloops.sh: the event-loop client engines of bench/experiments/clientloops (our own
# epoll loop, gnet v2's client, nbio's engine) side by side on one workload against one
# cluster, interleaved, ROUNDS rounds: USERS keep-alive connections, each sending GET
# REQ_PATH (default /health) every INTERVAL after its previous response, dialled over
# RAMP seconds, measured over HOLD seconds.
#
# The cluster (INSTANCES workers, a fresh copy of the seed per run) runs on SERVER_CPU,
# the tool on LOAD_CPU. One row per run: connections held, requests and req/s in the hold,
# send lag and round trip p50/p99/max, the 1 ms hiccup probe's p99/max (all ms), the
# tool's own CPU in the hold (user + system) and per request, its RSS at the end of the
# hold, its GC cycles in the hold, errors and reconnects. Compare the rows of one round,
# as ratios. Each run's JSON line is kept in OUT when that is set.
#
#   USERS=5000 ROUNDS=2 bench/clientloops.sh
#   USERS=300 INTERVAL=100ms RAMP=1 HOLD=3 ROUNDS=1 INSTANCES=1 bench/clientloops.sh   # a smoke test
#   USERS=20000 RAMP=20 HOLD=60 bench/clientloops.sh
#   USERS=50000 RAMP=30 HOLD=60 LOCAL_ADDRS=127.0.0.2-127.0.0.11 bench/clientloops.sh
#   GEN_PREFIX="chrt -f 10" USERS=50000 ENGINES="epoll gnet" bench/clientloops.sh
#
# Past ~14,000 connections to one ip:port Linux's connect() slows down 30-fold (docs/bench.md,
# "The connect() cliff"); on loopback the tool spreads its connections over 127.0.0.x
# source addresses by itself, LOCAL_ADDRS names them explicitly. GEN_PREFIX runs before
# the tool's taskset (`chrt -f 10`: real-time priority, so nothing else on LOAD_CPU delays
# it). The tool needs a descriptor limit above USERS (ulimit -n).
# Needs bin/supervisor, bin/worker, bin/clientloops and data/seed.db (`make build seed`)
# and python3.
set -euo pipefail
cd "$(dirname "$0")/.."

ENGINES=${ENGINES:-"epoll gnet nbio"}
USERS=${USERS:-5000}
ROUNDS=${ROUNDS:-2}
INTERVAL=${INTERVAL:-5s}
RAMP=${RAMP:-10}
HOLD=${HOLD:-30}
REQ_PATH=${REQ_PATH:-/health}
LOCAL_ADDRS=${LOCAL_ADDRS:-}
INSTANCES=${INSTANCES:-3}
SERVER_CPU=${SERVER_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
PORT=${PORT:-38300}
GEN_PREFIX=${GEN_PREFIX:-}
export JWT_SECRET=${JWT_SECRET:-twelve-dollar-challenge}
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

[ -x bin/clientloops ] && [ -x bin/supervisor ] && [ -f data/seed.db ] ||
  { echo "bench/clientloops.sh: run 'make build seed' first" >&2; exit 1; }

echo "engine users connected requests rps lag_p50 lag_p99 lag_max rtt_p50 rtt_p99 rtt_max hiccup_p99 hiccup_max cpu_s us_per_req rss_mb gc errors reconnects"
for round in $(seq "$ROUNDS"); do
  for engine in $ENGINES; do
    cp data/seed.db "$WORK/m.db"; rm -f "$WORK/m.db-wal" "$WORK/m.db-shm"
    SQLITE_PATH="$WORK/m.db" taskset -c "$SERVER_CPU" bin/supervisor run -config configs/cluster.yaml \
      -instances "$INSTANCES" -listen "127.0.0.1:$PORT" -log-level warn >"$WORK/s.log" 2>&1 &
    sp=$!
    for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
    $GEN_PREFIX taskset -c "$LOAD_CPU" bin/clientloops -engine "$engine" -n "$USERS" -interval "$INTERVAL" \
      -ramp "${RAMP}s" -hold "${HOLD}s" -path "$REQ_PATH" ${LOCAL_ADDRS:+-local-addrs "$LOCAL_ADDRS"} \
      "http://127.0.0.1:$PORT" >"$WORK/cl.json" 2>"$WORK/cl.err" || true
    kill -TERM $sp; wait $sp 2>/dev/null || true
    cp "$WORK/cl.json" "${OUT:-$WORK}/clientloops-$engine-$USERS${GEN_PREFIX:+-rt}-r$round.json" 2>/dev/null || true
    python3 - "$engine" "$WORK/cl.json" "$WORK/cl.err" <<'PY'
import json, sys
engine, path, errpath = sys.argv[1:4]
try:
    r = json.loads(open(path).read().strip().splitlines()[-1])
except Exception as e:
    err = open(errpath).read().strip().splitlines()
    print(engine, "no result:", err[-1] if err else e); sys.exit(0)
l, t, h = r["send_lag"], r["round_trip"], r["hiccup"]
print(engine, r["users"], r["connected"], r["requests"], r["rps"], l["p50_ms"], l["p99_ms"], l["max_ms"],
      t["p50_ms"], t["p99_ms"], t["max_ms"], h["p99_ms"], h["max_ms"], r["cpu_s"], r["us_per_req"], r["rss_mb"],
      r["gc_cycles"], r["errors"] or 0, r["reconnects"])
PY
  done
done
