#!/usr/bin/env bash
# bench/journey-engines.sh: the journey's two engines (`autocannon users -engine loop` and
# `-engine goroutine`) side by side against one cluster, interleaved, ROUNDS rounds.
#
# The cluster (INSTANCES workers, a fresh copy of the seed) runs on SERVER_CPU, the
# generator on LOAD_CPU, at time scale 1 (the challenge's own think times). Per run: the
# requests and req/s, p95/p99 from due time, the generator's verdict, in the hold the
# median and worst of the per-second p99s of its 1 ms hiccup probe and of its send lag,
# and the generator's CPU (user + system of it and its child processes, /usr/bin/time's
# figures) per request. Compare the rows of one run, as ratios.
#
#   USERS=50000 ROUNDS=2 bench/journey-engines.sh
#   GEN_PREFIX="chrt -f 10" USERS=50000 ROUNDS=1 bench/journey-engines.sh   # the generator's core its own
#
# GEN_PREFIX runs before the generator's taskset: `chrt -f 10` gives it real-time priority,
# so that on a shared machine nothing else on LOAD_CPU delays it (docs/bench.md, "The
# generator's verdict", does the same).
# Needs bin/supervisor, bin/worker, bin/autocannon, data/seed.db and data/tokens.json
# (`make build seed`), python3 and /usr/bin/time.
set -euo pipefail
cd "$(dirname "$0")/.."

ENGINES=${ENGINES:-"loop goroutine"}
USERS=${USERS:-50000}
ROUNDS=${ROUNDS:-2}
RAMP=${RAMP:-30}
HOLD=${HOLD:-60}
INSTANCES=${INSTANCES:-3}
SERVER_CPU=${SERVER_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
PORT=${PORT:-38200}
GEN_PREFIX=${GEN_PREFIX:-}
# The secret that signed data/tokens.json (`make seed` makes data/jwt_secret), else the challenge's.
export JWT_SECRET=${JWT_SECRET:-$(cat data/jwt_secret 2>/dev/null || echo twelve-dollar-challenge)}
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

[ -x bin/autocannon ] && [ -x bin/supervisor ] && [ -f data/seed.db ] && [ -f data/tokens.json ] ||
  { echo "bench/journey-engines.sh: run 'make build seed' first" >&2; exit 1; }

echo "engine users requests rps p95_ms p99_ms verdict hiccup_p99_med hiccup_p99_max lag_p99_med lag_p99_max gen_cpu_s us_per_req"
for round in $(seq "$ROUNDS"); do
  for engine in $ENGINES; do
    cp data/seed.db "$WORK/m.db"; rm -f "$WORK/m.db-wal" "$WORK/m.db-shm"
    SQLITE_PATH="$WORK/m.db" taskset -c "$SERVER_CPU" bin/supervisor run -config configs/cluster.yaml \
      -instances "$INSTANCES" -listen "127.0.0.1:$PORT" -log-level warn >"$WORK/s.log" 2>&1 &
    sp=$!
    for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
    /usr/bin/time -f "%U %S" -o "$WORK/time" $GEN_PREFIX taskset -c "$LOAD_CPU" bin/autocannon users -engine "$engine" \
      -j -progress 0 -n "$USERS" -ramp "${RAMP}s" -hold "${HOLD}s" -rampdown 5s \
      -tokens data/tokens.json "http://127.0.0.1:$PORT" >"$WORK/ac.json" 2>"$WORK/ac.err" || true
    kill -TERM $sp; wait $sp 2>/dev/null || true
    cp "$WORK/ac.json" "${OUT:-$WORK}/journey-$engine-$USERS${GEN_PREFIX:+-rt}-r$round.json" 2>/dev/null || true
    python3 - "$engine" "$WORK/ac.json" "$WORK/time" "$RAMP" "$HOLD" <<'PY'
import json, statistics, sys
engine, path, tpath, ramp, hold = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
try:
    j = json.load(open(path))
except Exception as e:
    print(engine, "no result:", e); sys.exit(0)
r = j
h = r["generator_verdict"]
verdict = "ok" if not h["saturated"] else "SATURATED(%s=%.1f@%.0fs)" % (h["signal"], h["value"], h["at_s"])
hold_w = [w for w in h.get("per_second", []) if ramp + 1 <= w["t"] <= ramp + hold]
hic = [w["hiccup_p99_ms"] for w in hold_w] or [0]
lag = [w["send_lag_p99_ms"] for w in hold_w if w["sends"] > 0] or [0]
u, s = map(float, open(tpath).read().split()[-2:])
lat = r["latency"]
ms = lambda ns: ns / 1e6
print(engine, r["users"], r["requests"], round(r["rps"]), round(ms(lat["p95_ns"]), 1), round(ms(lat["p99_ns"]), 1), verdict,
      round(statistics.median(hic), 2), round(max(hic), 2), round(statistics.median(lag), 2), round(max(lag), 2),
      round(u + s, 1), round(1e6 * (u + s) / max(r["requests"], 1), 1))
PY
  done
done
