#!/usr/bin/env bash
# bench/journey-cpu.sh: CPU time per request of worker builds under the challenge's user
# journey, at few and at many open connections, side by side in one run.
#
# Each (worker, users) pair runs ROUNDS times, interleaved: the worker alone (GOMAXPROCS=1,
# no quota) on SERVER_CPU with a fresh copy of the seed, `autocannon users` on LOAD_CPU.
# The same offered rate (~2,100 req/s) comes from 64 users at time scale 330 or 10,000
# users at time scale 2, so what differs is the number of open connections. CPU is the
# worker's user + system time from /proc/PID/stat over MEASURE seconds of the hold,
# divided by the requests the hold served (the generator's hold req/s). One line per
# run; compare the rows of one run, as ratios.
#
#   WORKERS="before=/tmp/before/bin/worker after=bin/worker" ROUNDS=3 bench/journey-cpu.sh
#
# Needs bin/autocannon, data/seed.db and data/tokens.json (`make build seed`), python3.
set -euo pipefail
cd "$(dirname "$0")/.."

WORKERS=${WORKERS:-"worker=bin/worker"}
USERS=${USERS:-"64:330 10000:2"} # users:time-scale
ROUNDS=${ROUNDS:-3}
RAMP=${RAMP:-10}
MEASURE=${MEASURE:-15}
SERVER_CPU=${SERVER_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
PORT=${PORT:-3499}
# The secret that signed data/tokens.json (`make seed` makes data/jwt_secret), else the challenge's.
export JWT_SECRET=${JWT_SECRET:-$(cat data/jwt_secret 2>/dev/null || echo twelve-dollar-challenge)}
TICK=$(getconf CLK_TCK)
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

[ -x bin/autocannon ] && [ -f data/seed.db ] && [ -f data/tokens.json ] ||
  { echo "bench/journey-cpu.sh: run 'make build seed' first" >&2; exit 1; }

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

echo "worker users time_scale hold_rps cpu_s us_per_req failures"
for round in $(seq "$ROUNDS"); do
  for w in $WORKERS; do
    name=${w%%=*} bin=${w#*=}
    for u in $USERS; do
      n=${u%%:*} ts=${u#*:}
      cp data/seed.db "$WORK/m.db"; rm -f "$WORK/m.db-wal" "$WORK/m.db-shm"
      SQLITE_PATH="$WORK/m.db" HOST=127.0.0.1 PORT=$PORT GOMAXPROCS=1 taskset -c "$SERVER_CPU" "$bin" -log-level warn >/dev/null 2>"$WORK/w.log" &
      wp=$!
      sleep 1
      taskset -c "$LOAD_CPU" bin/autocannon users -n "$n" -time-scale "$ts" -ramp "${RAMP}s" \
        -hold "$((MEASURE + 5))s" -rampdown 1s -progress 0 -j -tokens data/tokens.json \
        "http://127.0.0.1:$PORT/" >"$WORK/ac.json" 2>"$WORK/ac.err" &
      ap=$!
      sleep $((RAMP + 2))
      c0=$(cpu_ticks $wp)
      sleep "$MEASURE"
      c1=$(cpu_ticks $wp)
      wait $ap || true # a FAIL verdict exits non-zero; the figures are still wanted
      kill $wp; wait $wp 2>/dev/null || true
      python3 - "$name" "$n" "$ts" "$c0" "$c1" "$TICK" "$MEASURE" "$WORK/ac.json" <<'PY'
import json, sys
name, n, ts, c0, c1, tick, measure, path = sys.argv[1:]
j = json.load(open(path))
hold = [s for s in j["stages"] if s["name"] == "hold"][0]
cpu = (int(c1) - int(c0)) / int(tick)
print(name, n, ts, round(hold["rps"]), round(cpu, 2),
      round(cpu / float(measure) / hold["rps"] * 1e6, 1), j["failures"])
PY
    done
  done
done
