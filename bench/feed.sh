#!/usr/bin/env bash
# bench/feed.sh: CPU time per request of the Go worker, side by side with the Node peer,
# for each feed endpoint and the challenge's request mix.
#
# The server is pinned to one core (SERVER_CPU) and wrk to another (LOAD_CPU). Each server
# gets a fresh copy of the seed. CPU per request is the server process's user and system
# time (from /proc/PID/stat) over the measured run divided by the requests wrk counted.
# Every (target, server) pair is measured RUNS times, interleaved, and the median is printed.
#
# Needs: wrk (Debian), bin/worker, data/seed.db and data/tokens.json (`make seed`), and for
# the peer a node-feed directory with node_modules (PEER_DIR; skipped when absent). The
# server `before` is another build of the worker (BEFORE_WORKER), e.g. of an earlier commit:
# SERVERS="before go node" BEFORE_WORKER=/tmp/before/bin/worker bench/feed.sh
# The servers `goroutine` and `loop` are the worker on that transport:
# SERVERS="goroutine loop node" TARGETS=mix bench/feed.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DUR=${DUR:-8}            # seconds per measured run
WARM=${WARM:-2}          # seconds of warm-up per server start
CONNS=${CONNS:-64}
RUNS=${RUNS:-3}
SERVER_CPU=${SERVER_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
# The Node entry of the challenge (node:http + better-sqlite3) is not in this repository:
# PEER_DIR names its directory; without it the node rows are skipped.
PEER_DIR=${PEER_DIR:-}
TARGETS=${TARGETS:-"feed post health mix"}
SERVERS=${SERVERS:-"go node"}
OUT=${OUT:-/dev/stdout}
# The secret that signed data/tokens.json (`make seed` makes data/jwt_secret), else the challenge's.
export JWT_SECRET=${JWT_SECRET:-$(cat data/jwt_secret 2>/dev/null || echo twelve-dollar-challenge)}
export TOKENS=${TOKENS:-data/tokens.json}
TICK=$(getconf CLK_TCK)
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

command -v wrk >/dev/null || { echo "bench/feed.sh: wrk is missing (apt-get install wrk)" >&2; exit 1; }
[ -x bin/worker ] && [ -f data/seed.db ] && [ -f "$TOKENS" ] || { echo "bench/feed.sh: run 'make build seed' first" >&2; exit 1; }

start_server() { # $1 = go|node, $2 = port; prints the pid
  cp data/seed.db "$WORK/$1.db"; rm -f "$WORK/$1.db-wal" "$WORK/$1.db-shm"
  case $1 in
    go)   SQLITE_PATH="$WORK/go.db" HOST=127.0.0.1 PORT=$2 LOG_LEVEL=warn taskset -c "$SERVER_CPU" bin/worker >/dev/null 2>"$WORK/go.log" & ;;
    goroutine|loop) # the worker on one transport (internal/http1), whatever the default
      SQLITE_PATH="$WORK/$1.db" HOST=127.0.0.1 PORT=$2 LOG_LEVEL=warn TRANSPORT=$1 taskset -c "$SERVER_CPU" bin/worker >/dev/null 2>"$WORK/$1.log" & ;;
    before) SQLITE_PATH="$WORK/before.db" HOST=127.0.0.1 PORT=$2 LOG_LEVEL=warn taskset -c "$SERVER_CPU" "${BEFORE_WORKER:?set BEFORE_WORKER}" >/dev/null 2>"$WORK/before.log" & ;;
    node) SQLITE_PATH="$WORK/node.db" PORT=$2 taskset -c "$SERVER_CPU" node "$PEER_DIR/feed.js" >/dev/null 2>"$WORK/node.log" & ;;
  esac
  local pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$2/health" >/dev/null 2>&1 && break; sleep 0.1; done
  echo "$pid"
}

wrk_args() { # $1 = target
  case $1 in
    feed)   echo "/feed" ;;
    post)   echo "-s bench/posts.lua /" ;;
    health) echo "/health" ;;
    mix)    echo "-s bench/mix.lua /" ;;
  esac
}

ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }

measure() { # $1 server, $2 target, $3 port, $4 pid -> "rps us_user us_sys p50 p99"
  local a path
  read -r -a a <<<"$(wrk_args "$2")"
  path=${a[-1]}; unset 'a[-1]'
  taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"${WARM}s" "${a[@]}" "http://127.0.0.1:$3$path" >/dev/null
  read -r u0 s0 <<<"$(ticks "$4")"
  taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"${DUR}s" --latency "${a[@]}" "http://127.0.0.1:$3$path" >"$WORK/wrk.txt"
  read -r u1 s1 <<<"$(ticks "$4")"
  local reqs rps p50 p99 non2xx
  reqs=$(awk '/requests in/ {print $1}' "$WORK/wrk.txt")
  rps=$(awk '/Requests\/sec/ {print $2}' "$WORK/wrk.txt")
  p50=$(awk '$1=="50%" {print $2}' "$WORK/wrk.txt")
  p99=$(awk '$1=="99%" {print $2}' "$WORK/wrk.txt")
  non2xx=$(awk '/Non-2xx/ {print $4}' "$WORK/wrk.txt"); non2xx=${non2xx:-0}
  awk -v r="$reqs" -v rps="$rps" -v du=$((u1-u0)) -v ds=$((s1-s0)) -v t="$TICK" -v p50="$p50" -v p99="$p99" -v e="$non2xx" \
    'BEGIN { printf "%.0f %.1f %.1f %s %s %s\n", rps, du/t*1e6/r, ds/t*1e6/r, p50, p99, e }'
}

servers=()
for s in $SERVERS; do
  if [ "$s" = node ] && { [ -z "$PEER_DIR" ] || [ ! -d "$PEER_DIR/node_modules" ]; }; then
    echo "# node peer skipped: PEER_DIR=${PEER_DIR:-(unset)} has no node_modules (give the Node entry's directory, npm install there)" >&2; continue
  fi
  servers+=("$s")
done

echo "# $(date -u +%FT%TZ) $(uname -r) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); server cpu $SERVER_CPU, wrk cpu $LOAD_CPU, -c$CONNS, ${DUR}s x $RUNS" >"$OUT"
printf "%-7s %-6s %9s %9s %9s %9s %9s %9s %7s\n" target server req/s us_user us_sys us_total p50 p99 non2xx >>"$OUT"
for target in $TARGETS; do
  for s in "${servers[@]}"; do : >"$WORK/res-$target-$s"; done
  for run in $(seq "$RUNS"); do
    port=3400
    for s in "${servers[@]}"; do
      port=$((port+1))
      pid=$(start_server "$s" "$port")
      measure "$s" "$target" "$port" "$pid" >>"$WORK/res-$target-$s"
      kill "$pid"; wait "$pid" 2>/dev/null || true
    done
  done
  for s in "${servers[@]}"; do
    # median by req/s over the runs
    sort -n "$WORK/res-$target-$s" | awk -v n="$RUNS" -v t="$target" -v s="$s" 'NR==int((n+1)/2) {
      printf "%-7s %-6s %9d %9.1f %9.1f %9.1f %9s %9s %7s\n", t, s, $1, $2, $3, $2+$3, $4, $5, $6 }' >>"$OUT"
  done
done
