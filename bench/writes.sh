#!/usr/bin/env bash
# bench/writes.sh: how writes scale with the cluster's workers, one write design against
# another, all in one run (docs/performance.md, "Writes across processes").
#
# For each round (RUNS), variant (VARIANTS), worker count (NS) and route (ROUTES) it starts
# `supervisor run -instances N` on a fresh copy of the seed, warms up for WARM seconds, then
# runs wrk with CONNS connections for DUR seconds and records req/s, p50 and p99, non-2xx
# answers, and CPU per request: user + system time of the supervisor and its workers
# (/proc/PID/stat) over the measured seconds, divided by the requests wrk counted. On the
# mix route a second wrk with PROBE_CONNS connections sends only likes beside it: their
# percentiles are the writes' latency under the mix. Everything shares the machine's cores
# unless CLUSTER_CPUS and LOAD_CPUS say otherwise (taskset).
#
# Variants are NAME=BINDIR[,VAR=VALUE...]: the supervisor and worker in BINDIR, with extra
# environment for the workers. E.g. the binaries of an earlier commit against these:
#
#   git worktree add /tmp/before c21f509 && (cd /tmp/before && go build -o bin/ ./cmd/...)
#   VARIANTS="before=/tmp/before/bin owner=bin flock=bin,WRITES=flock" bench/writes.sh out.csv
#
# Output: one CSV row per run in OUTFILE, then the medians per (variant, N, route) with the
# ratio of N workers to 1 worker of the same variant.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/writes.sh OUTFILE.csv}
VARIANTS=${VARIANTS:-"owner=bin"}
NS=${NS:-"1 2"}
ROUTES=${ROUTES:-"likes mix"}
RUNS=${RUNS:-3}
DUR=${DUR:-8}
WARM=${WARM:-2}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
PROBE_CONNS=${PROBE_CONNS:-2}
CLUSTER_CPUS=${CLUSTER_CPUS:-}
LOAD_CPUS=${LOAD_CPUS:-}
WRK=${WRK:-wrk}
PORT=${PORT:-3710}
SEED=${SEED:-data/seed.db}
# The secret that signed data/tokens.json (`make seed` makes data/jwt_secret), else the challenge's.
export JWT_SECRET=${JWT_SECRET:-$(cat data/jwt_secret 2>/dev/null || echo twelve-dollar-challenge)}
export TOKENS=${TOKENS:-data/tokens.json}
TICK=$(getconf CLK_TCK)
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; [ -n "${DEBUG:-}" ] && cp "$WORK/cluster.log" /tmp/writes-cluster.log; rm -rf "$WORK"' EXIT

[ -f "$SEED" ] && [ -f "$TOKENS" ] || { echo "need $SEED and $TOKENS: make seed" >&2; exit 1; }
command -v "$WRK" >/dev/null || { echo "need wrk (apt-get install wrk)" >&2; exit 1; }

pinned() { # pinned CPULIST CMD...: taskset when CPULIST is set
  local cpus=$1; shift
  if [ -n "$cpus" ]; then exec taskset -c "$cpus" "$@"; else exec "$@"; fi
}
now() { date +%s.%N; }
ticks() { local t=0 p; for p in "$@"; do [ -r "/proc/$p/stat" ] && t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done; echo "$t"; }
ms() { awk -v x="$1" 'BEGIN { if (x ~ /us$/) print x/1000; else if (x ~ /ms$/) print x+0; else if (x ~ /s$/) print x*1000; else print x }'; }
script() { case $1 in likes) echo bench/likes.lua ;; mix) echo bench/mix.lua ;; post) echo bench/posts.lua ;; esac; }

echo "# $(date -u +%FT%TZ) $(nproc) cpus ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), kernel $(uname -r)" >"$OUT"
echo "# wrk -t$THREADS -c$CONNS, ${WARM}s warm-up, ${DUR}s measured; probe: likes over $PROBE_CONNS connections beside the mix; cluster cpus ${CLUSTER_CPUS:-all}, load cpus ${LOAD_CPUS:-all}" >>"$OUT"
echo "run,variant,n,route,rps,cpu_us_per_req,p50_ms,p99_ms,writes_p50_ms,writes_p99_ms,non2xx,errors" >>"$OUT"

for run in $(seq "$RUNS"); do
  for variant in $VARIANTS; do
    name=${variant%%=*}; rest=${variant#*=}
    bindir=${rest%%,*}; envs=()
    [ "$rest" != "$bindir" ] && IFS=, read -r -a envs <<<"${rest#*,}"
    for n in $NS; do
      for route in $ROUTES; do
        cp "$SEED" "$WORK/feed.db"; rm -f "$WORK"/feed.db-* "$WORK"/feed.db.writelock
        (for e in "${envs[@]}"; do export "${e?}"; done
         SQLITE_PATH="$WORK/feed.db" pinned "$CLUSTER_CPUS" "$bindir/supervisor" run -instances "$n" \
          -listen "127.0.0.1:$PORT" -socket "$WORK/sup.sock" -log-level warn 2>>"$WORK/cluster.log") &
        sup=$!
        for _ in $(seq 200); do
          [ "$("$bindir/supervisor" status -json -socket "$WORK/sup.sock" 2>/dev/null | grep -o '"status":"online"' | wc -l)" -eq "$n" ] && break
          sleep 0.1
        done
        pids=("$sup" $(pgrep -P "$sup"))
        s=$(script "$route")
        (pinned "$LOAD_CPUS" "$WRK" -t"$THREADS" -c"$CONNS" -d"${WARM}s" -s "$s" "http://127.0.0.1:$PORT/" >/dev/null 2>&1) || true
        probe=""
        if [ "$route" = mix ] && [ "$PROBE_CONNS" -gt 0 ]; then
          (pinned "$LOAD_CPUS" "$WRK" -t1 -c"$PROBE_CONNS" -d"${DUR}s" --latency -s bench/likes.lua "http://127.0.0.1:$PORT/" >"$WORK/probe.txt" 2>&1) &
          probe=$!
        fi
        t0=$(ticks "${pids[@]}"); s0=$(now)
        (pinned "$LOAD_CPUS" "$WRK" -t"$THREADS" -c"$CONNS" -d"${DUR}s" --latency -s "$s" "http://127.0.0.1:$PORT/" >"$WORK/wrk.txt" 2>&1) || true
        [ -n "$probe" ] && wait "$probe"
        t1=$(ticks "${pids[@]}"); s1=$(now)
        reqs=$(awk '/requests in/ {print $1}' "$WORK/wrk.txt")
        preqs=0; wp50=""; wp99=""
        if [ -n "$probe" ]; then
          preqs=$(awk '/requests in/ {print $1}' "$WORK/probe.txt")
          wp50=$(ms "$(awk '$1=="50%" {print $2}' "$WORK/probe.txt")"); wp99=$(ms "$(awk '$1=="99%" {print $2}' "$WORK/probe.txt")")
        elif [ "$route" = likes ]; then
          wp50=x; wp99=x
        fi
        rps=$(awk '/Requests\/sec/ {print $2}' "$WORK/wrk.txt")
        p50=$(ms "$(awk '$1=="50%" {print $2}' "$WORK/wrk.txt")"); p99=$(ms "$(awk '$1=="99%" {print $2}' "$WORK/wrk.txt")")
        [ "$wp50" = x ] && { wp50=$p50; wp99=$p99; }
        non2xx=$(cat "$WORK/wrk.txt" ${probe:+"$WORK/probe.txt"} | awk '/Non-2xx/ {s += $NF} END {print s+0}')
        errs=$(awk '/Socket errors/ {print}' "$WORK/wrk.txt" | tr ',' ' ')
        cpu=$(awk -v dt=$((t1 - t0)) -v tk="$TICK" -v q="${reqs:-0}" -v pq="${preqs:-0}" 'BEGIN { printf "%.1f", (q + pq ? dt / tk * 1e6 / (q + pq) : 0) }')
        echo "$run,$name,$n,$route,${rps:-0},$cpu,$p50,$p99,$wp50,$wp99,$non2xx,$errs" | tee -a "$OUT"
        kill "$sup" 2>/dev/null || true
        wait "$sup" 2>/dev/null || true
      done
    done
  done
done

# Medians per (variant, n, route), and the ratio of n workers to 1 worker of the variant.
echo
echo "variant n route | req/s (×1 worker) | CPU µs/req (×1 worker) | p99 ms | writes p99 ms   [medians of $RUNS]"
grep -v '^#' "$OUT" | tail -n +2 | awk -F, '
  { k = $2 SUBSEP $3 SUBSEP $4; keys[k] = 1; cnt[k]++; rps[k, cnt[k]] = $5; cpu[k, cnt[k]] = $6; p99[k, cnt[k]] = $8; w99[k, cnt[k]] = $10 }
  function med(a, k, n,   i, j, t, v) { for (i = 1; i <= n; i++) v[i] = a[k, i] + 0
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
  END { for (k in keys) { split(k, p, SUBSEP); m[k, "rps"] = med(rps, k, cnt[k]); m[k, "cpu"] = med(cpu, k, cnt[k]) }
    for (k in keys) { split(k, p, SUBSEP); one = p[1] SUBSEP 1 SUBSEP p[3]
      r1 = (one in keys) ? sprintf("%.2f", m[k, "rps"] / m[one, "rps"]) : "-"; c1 = (one in keys) ? sprintf("%.2f", m[k, "cpu"] / m[one, "cpu"]) : "-"
      printf "%s %s %s | %.0f (%s) | %.1f (%s) | %.2f | %.2f\n", p[1], p[2], p[3], m[k, "rps"], r1, m[k, "cpu"], c1, med(p99, k, cnt[k]), med(w99, k, cnt[k]) } }' | sort
