#!/usr/bin/env bash
# bench/workloads.sh: the $6-server article's routes on one core, served by our worker
# directly and behind nginx: front.conf (a keep-alive proxy), cache.conf (plus a 10 s
# micro-cache on the rendered page) and static.conf (plus /static/ from disk). Prints the
# markdown table of docs/workloads.md ("Behind nginx").
#
# The server (one worker and, when in front, nginx with worker_processes 1) is pinned to
# SERVER_CPU and wrk (-t1 -cCONNS) to LOAD_CPU. Server CPU per request is the user+system
# time (/proc/PID/stat) of the worker and every nginx process over the measured run,
# divided by the requests wrk counted ("of which nginx": the nginx processes' part), and
# 1e6/µs is what one whole core would serve at that cost: on a shared, busy machine req/s
# says how much of the core the server got, CPU per request what each request costs.
# Each cell is the mean of RUNS runs of DUR seconds, after WARM seconds of warm-up; runs go
# round the servers in turn. A route the worker answers with 404 is left out with a note.
#
# Needs: nginx, wrk, taskset, bin/worker, data/seed.db (`make build seed`).
set -euo pipefail
cd "$(dirname "$0")/.."

DUR=${DUR:-5}
WARM=${WARM:-1}
RUNS=${RUNS:-3}
CONNS=${CONNS:-64}
SERVER_CPU=${SERVER_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
WPORT=${WPORT:-3481}
NPORT=${NPORT:-8481}
RAW=${RAW:-/dev/null}    # every run, one line each
WORKER=${WORKER:-bin/worker}   # the worker binary
export JWT_SECRET=${JWT_SECRET:-twelve-dollar-challenge}
TICK=$(getconf CLK_TCK)
WORK=$(mktemp -d)
wpid=
cleanup() {
  NGINX_PREFIX="$WORK/nginx" configs/nginx/nginx.sh stop >/dev/null 2>&1 || true
  [ -n "$wpid" ] && { kill "$wpid" 2>/dev/null; wait "$wpid" 2>/dev/null || true; }
  rm -rf "$WORK"
}
trap cleanup EXIT

for t in wrk taskset curl; do command -v $t >/dev/null || { echo "bench/workloads.sh: $t is missing" >&2; exit 1; }; done
[ -x "$WORKER" ] && [ -f data/seed.db ] || { echo "bench/workloads.sh: run 'make build seed' first" >&2; exit 1; }

# route name, path, and the servers that serve it: direct, front (a), cache (b), static (c).
ROUTES=(
  "static|/static/catalog.html|direct front static"
  "json|/api/hello|direct front"
  "query|/api/products?page=1|direct front"
  "rendered|/products?page=1|direct front cache"
  "feed|/feed|direct front"
)
SERVERS=(direct front cache static)

cat >"$WORK/summary.lua" <<'EOF'
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("SUMMARY %d %d %d %d %d\n", summary.requests, summary.bytes,
    summary.duration, e.status, e.connect + e.read + e.write + e.timeout))
end
EOF

cp data/seed.db "$WORK/feed.db"
SQLITE_PATH="$WORK/feed.db" HOST=127.0.0.1 PORT=$WPORT LOG_LEVEL=warn taskset -c "$SERVER_CPU" "$WORKER" >/dev/null 2>"$WORK/worker.log" &
wpid=$!
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$WPORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$WPORT/health" >/dev/null || { echo "worker did not start:" >&2; cat "$WORK/worker.log" >&2; exit 1; }

routes=()
for r in "${ROUTES[@]}"; do
  IFS='|' read -r name path _ <<<"$r"
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$WPORT$path")
  if [ "$code" = 200 ]; then routes+=("$r"); else echo "# $name ($path): the worker answers $code, left out" >&2; fi
done

# nginx_pids: the master and its workers (none when direct).
nginx_pids() {
  [ "$1" = direct ] && return
  local m
  m=$(cat "$WORK/nginx/nginx.pid")
  echo "$m"; cat "/proc/$m/task/$m/children"
}
ticks() { # total utime+stime of the given pids
  local t=0 p
  for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$t"
}

measure() { # $1 server, $2 route, $3 path, $4 port -> "server route rps us_per_req us_nginx_per_req bytes_per_s errors"
  local url="http://127.0.0.1:$4$3" np w0 w1 n0 n1
  taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"${WARM}s" "$url" >/dev/null
  read -r -a np <<<"$(nginx_pids "$1" | xargs)"
  w0=$(ticks "$wpid"); n0=$(ticks "${np[@]}")
  taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"${DUR}s" -s "$WORK/summary.lua" "$url" >"$WORK/wrk.txt"
  w1=$(ticks "$wpid"); n1=$(ticks "${np[@]}")
  awk -v s="$1" -v r="$2" -v dw=$((w1 - w0)) -v dn=$((n1 - n0)) -v tick="$TICK" '/^SUMMARY/ {
    printf "%s %s %.0f %.1f %.1f %.0f %d\n", s, r, $2 / ($4 / 1e6), (dw + dn) / tick * 1e6 / $2, dn / tick * 1e6 / $2,
      $3 / ($4 / 1e6), $5 + $6 }' "$WORK/wrk.txt" | tee -a "$RAW" >>"$WORK/runs"
}

: >"$WORK/runs"
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for run in $(seq "$RUNS"); do
  for s in "${SERVERS[@]}"; do
    port=$WPORT
    if [ "$s" != direct ]; then
      rm -rf "$WORK/nginx"
      NGINX_PREFIX="$WORK/nginx" NGINX_PORT=$NPORT UPSTREAM=127.0.0.1:$WPORT WORKER_PROCESSES=1 \
        taskset -c "$SERVER_CPU" configs/nginx/nginx.sh start "$s" >/dev/null 2>&1
      port=$NPORT
    fi
    for r in "${routes[@]}"; do
      IFS='|' read -r name path servers <<<"$r"
      case " $servers " in *" $s "*) measure "$s" "$name" "$path" "$port" ;; esac
    done
    if [ "$s" != direct ]; then NGINX_PREFIX="$WORK/nginx" configs/nginx/nginx.sh stop >/dev/null; fi
  done
done

label() {
  case $1 in
    direct) echo "worker direct" ;; front) echo "nginx (a) proxy" ;;
    cache) echo "nginx (b) micro-cache" ;; static) echo "nginx (c) from disk" ;;
  esac
}
echo "<!-- $(date -u +%FT%TZ) $(uname -r) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); server cpu $SERVER_CPU, wrk cpu $LOAD_CPU, -t1 -c$CONNS, ${DUR}s x $RUNS, mean; load average before $load0, after $(cut -d' ' -f1-3 /proc/loadavg) -->"
echo "| route | path | served by | req/s | server CPU µs/req | of which nginx | 1e6/µs | MB/s | errors |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|"
for r in "${routes[@]}"; do
  IFS='|' read -r name path servers <<<"$r"
  for s in $servers; do
    awk -v s="$s" -v r="$name" -v p="$path" -v l="$(label "$s")" '$1 == s && $2 == r {
        n++; rps += $3; us += $4; ng += $5; bps += $6; e += $7 }
      END { if (n) printf "| %s | `%s` | %s | %.0f | %.1f | %.1f | %.0f | %.1f | %d |\n", r, p, l, rps / n, us / n, ng / n, 1e6 / (us / n), bps / n / 1e6, e }' "$WORK/runs"
  done
done
