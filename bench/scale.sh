#!/usr/bin/env bash
# bench/scale.sh: how the feed worker scales with cores, prefork versus one process.
#
# For each N in NS and each mode in MODES it runs: `cluster`, the supervisor with N workers
# on N cores; `prefork`, N worker processes started by hand, each pinned to its own core
# with GOMAXPROCS=1 and binding one port with SO_REUSEPORT; `single`, one worker process
# with GOMAXPROCS=N on the same N cores; and
# for each route it drives wrk from the LOAD_CPUS cores and records req/s, latency, and the
# CPU the server processes used (user+system from /proc/PID/stat) per request.
#
# Usage: bench/scale.sh OUTFILE.csv     (env below; needs bin/worker and wrk)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/scale.sh OUTFILE.csv}
NS=${NS:-"1 2 4 8 12"}
ROUTES=${ROUTES:-"health post feed mix"}
MODES=${MODES:-"prefork single"}
DUR=${DUR:-5}
WARM=${WARM:-1}
CONNS=${CONNS:-256}
WRK_THREADS=${WRK_THREADS:-4}
LOAD_CPUS=${LOAD_CPUS:-12-15}
CPU0=${CPU0:-0} # the servers use cores CPU0 .. CPU0+N-1
WORKER=${WORKER:-bin/worker}
SUPERVISOR=${SUPERVISOR:-bin/supervisor}
WRK=${WRK:-wrk}
PORT=${PORT:-3700}
# The secret that signed data/tokens.json (`make seed` makes data/jwt_secret), else the challenge's.
export JWT_SECRET=${JWT_SECRET:-$(cat data/jwt_secret 2>/dev/null || echo twelve-dollar-challenge)}
export TOKENS=${TOKENS:-data/tokens.json}
TICK=$(getconf CLK_TCK)
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; [ -n "${DEBUG:-}" ] && cp "$WORK/worker.log" /tmp/scale-worker.log; rm -rf "$WORK"' EXIT

pin() { # pin CPULIST CMD...: taskset when the system has it and honours it
  if command -v taskset >/dev/null && taskset -c "$1" true 2>/dev/null; then taskset -c "$@"; else shift; "$@"; fi
}
start() { # start CPULIST CMD... in the background as this subshell's own pid (for /proc)
  if command -v taskset >/dev/null && taskset -c "$1" true 2>/dev/null; then exec taskset -c "$@"; else shift; exec "$@"; fi
}
now() { date +%s.%N; }

if [ ! -f data/seed.db ] || [ ! -f "$TOKENS" ]; then
  mkdir -p data
  t=$(now)
  "$WORKER" seed -db data/seed.db -tokens "$TOKENS" 2>"$WORK/seed.log"
  awk -v a="$t" -v b="$(now)" 'BEGIN { printf "# seed generated in %.1f s\n", b - a }' >&2
fi

route_args() {
  case $1 in
    health) echo "/health" ;;
    post)   echo "-s bench/posts.lua /" ;;
    feed)   echo "/feed" ;;
    mix)    echo "-s bench/mix.lua /" ;;
  esac
}

ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done; echo "$t"; }

{
  echo "# $(date -u +%FT%TZ) host: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r)"
  echo "# load: wrk -t$WRK_THREADS -c$CONNS on cpus $LOAD_CPUS, ${WARM}s warm-up, ${DUR}s measured; taskset $(taskset -c 0 true 2>/dev/null && echo honoured || echo unavailable)"
  echo "n,mode,route,rps,cpu_us_per_req,server_cores_busy,p50_ms,p99_ms,errors"
} >"$OUT"

for n in $NS; do
  for mode in $MODES; do
    cp data/seed.db "$WORK/feed.db"; rm -f "$WORK/feed.db-wal" "$WORK/feed.db-shm"
    pids=()
    if [ "$mode" = cluster ]; then
      # The real thing: `supervisor run` with N workers on the N cores (the workers inherit
      # the supervisor's CPU set; the kernel places them), one socket per slot.
      SQLITE_PATH="$WORK/feed.db" LOG_LEVEL=warn \
        start "$CPU0-$((CPU0 + n - 1))" "$SUPERVISOR" run -config configs/cluster.yaml -instances "$n" \
        -listen "127.0.0.1:$PORT" -socket "$WORK/sup.sock" -log-level warn 2>>"$WORK/worker.log" &
      pids+=($!)
      for _ in $(seq 100); do
        [ "$("$SUPERVISOR" status -json -socket "$WORK/sup.sock" 2>/dev/null | grep -o '"status":"online"' | wc -l)" -eq "$n" ] && break
        sleep 0.1
      done
      pids+=($(pgrep -P "${pids[0]}"))
    elif [ "$mode" = prefork ]; then
      for i in $(seq 0 $((n - 1))); do
        SQLITE_PATH="$WORK/feed.db" HOST=127.0.0.1 PORT=$PORT GOMAXPROCS=1 WORKER_ID=$i WORKER_COUNT=$n LOG_LEVEL=warn \
          start "$((CPU0 + i))" "$WORKER" 2>>"$WORK/worker.log" &
        pids+=($!)
      done
    else
      SQLITE_PATH="$WORK/feed.db" HOST=127.0.0.1 PORT=$PORT GOMAXPROCS=$n LOG_LEVEL=warn \
        start "$CPU0-$((CPU0 + n - 1))" "$WORKER" 2>>"$WORK/worker.log" &
      pids+=($!)
    fi
    for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
    sleep 1 # the other workers of the group finish opening the database
    for route in $ROUTES; do
      read -r -a a <<<"$(route_args "$route")"
      path=${a[-1]}; unset 'a[-1]'
      pin "$LOAD_CPUS" "$WRK" -t"$WRK_THREADS" -c"$CONNS" -d"${WARM}s" "${a[@]}" "http://127.0.0.1:$PORT$path" >/dev/null 2>&1 || true
      t0=$(ticks "${pids[@]}"); s0=$(now)
      pin "$LOAD_CPUS" "$WRK" -t"$WRK_THREADS" -c"$CONNS" -d"${DUR}s" --latency "${a[@]}" "http://127.0.0.1:$PORT$path" >"$WORK/wrk.txt" 2>&1 || true
      t1=$(ticks "${pids[@]}"); s1=$(now)
      [ -n "${DEBUG:-}" ] && echo "pids ${pids[*]} ticks $t0 -> $t1" >&2
      reqs=$(awk '/requests in/ {print $1}' "$WORK/wrk.txt"); reqs=${reqs:-0}
      rps=$(awk '/Requests\/sec/ {print $2}' "$WORK/wrk.txt")
      p50=$(awk '$1=="50%" {print $2}' "$WORK/wrk.txt"); p99=$(awk '$1=="99%" {print $2}' "$WORK/wrk.txt")
      errs=$(awk '/Non-2xx|Socket errors/ {s=s $0 ";"} END {print s}' "$WORK/wrk.txt" | tr ',' ' ')
      awk -v n="$n" -v m="$mode" -v r="$route" -v q="$reqs" -v rps="$rps" -v dt=$((t1 - t0)) -v tk="$TICK" \
          -v el="$(awk -v a="$s0" -v b="$s1" 'BEGIN { print b - a }')" -v p50="$p50" -v p99="$p99" -v e="$errs" \
        'function ms(x) { if (x ~ /us$/) return x/1000; if (x ~ /ms$/) return x+0; if (x ~ /s$/) return x*1000; return x }
         BEGIN { printf "%d,%s,%s,%.0f,%.1f,%.2f,%.2f,%.2f,%s\n", n, m, r, rps, (q ? dt/tk*1e6/q : 0), dt/tk/el, ms(p50), ms(p99), e }' >>"$OUT"
    done
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  done
done
cat "$OUT"
