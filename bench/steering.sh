#!/usr/bin/env bash
# Steering measured: the kernel's SO_REUSEPORT hash against the supervisor's eBPF round robin
# (internal/steering), same run, interleaved rounds, on a cluster of N workers (default 2):
#
#  1. the seed's heavy commands: autocannon -c 5 -p 2 -w 1 and -c 20 -p 2 -w 6 (PATCH 32 KB);
#  2. the program's own cost: new connections per second (wrk, "Connection: close", the
#     hello route: one connection per request) and the workers' CPU per connection;
#  3. kill -9 of one worker whose restart waits 10 s: how many of 40 fresh connections,
#     made at once, wait more than 0.5 s.
#
# Usage: bench/steering.sh            (ROUNDS=3 D=10 N=2 OUT=data/steering)
# Needs: make build, data/seed.db (make seed), wrk, curl.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
D=${D:-10}
N=${N:-2}
OUT=${OUT:-data/steering}
PORT=${PORT:-3561}
BIN=${BIN:-bin}
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cp data/seed.db "$work/feed.db"
sock="$work/sup.sock"
printf 'exp_backoff_restart_delay: 10s\n' >"$work/backoff.yaml"
export SQLITE_PATH="$work/feed.db" JWT_SECRET=twelve-dollar-challenge
url="http://127.0.0.1:$PORT"

start() { # mode [config]
	local cfg=()
	[ -n "${2:-}" ] && cfg=(-config "$2")
	"$BIN/supervisor" run "${cfg[@]}" -socket "$sock" -instances "$N" -listen "127.0.0.1:$PORT" \
		-steering "$1" -log-file "$work/sup-$1.log" -- "$BIN/worker" -log-level warn &
	sup=$!
	for _ in $(seq 100); do
		if "$BIN/supervisor" status -socket "$sock" 2>/dev/null | grep -c ' online ' | grep -qx "$N"; then
			return
		fi
		sleep 0.1
	done
	echo "cluster ($1) did not come online" >&2
	exit 1
}
stop() {
	"$BIN/supervisor" stop -socket "$sock" >/dev/null 2>&1 || true
	wait "$sup" 2>/dev/null || true
}
steering() { "$BIN/supervisor" status -socket "$sock" -json | sed -n 's/.*"steering":"\([a-z-]*\)".*/\1/p'; }
pids() { "$BIN/supervisor" status -socket "$sock" -json | grep -o '"pid":[0-9]*' | cut -d: -f2; }
ticks() { # summed utime+stime of the given pids
	local t=0
	for p in "$@"; do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done
	echo "$t"
}
heavy() { # autocannon args...: req/s average
	"$BIN/autocannon" "$@" -d "$D" -m PATCH -H "Content-Type: application/json" -b '{"foo1":"bar"}' \
		"$url/api/resource/123" 2>&1 | awk -F'│' '/Req\/Sec/ {gsub(/[ ,]/,"",$7); print $7}'
}
counts() { # each worker's request counter, space-separated, slot order
	"$BIN/supervisor" status -socket "$sock" -json | grep -o '"requests":[0-9]*' | cut -d: -f2 | tr '\n' ' '
}
split() { # before after: each worker's share of the requests between them, in percent
	awk -v a="$1" -v b="$2" 'BEGIN {n = split(a, x, " "); split(b, y, " "); t = 0
		for (i = 1; i <= n; i++) { d[i] = y[i] - x[i]; t += d[i] }
		for (i = 1; i <= n; i++) printf "%s%.0f", (i > 1 ? "/" : ""), (t ? 100 * d[i] / t : 0); print "%" }'
}
measure_heavy() { # label autocannon-args...
	local label=$1 c0 c1 rps
	shift
	c0=$(counts)
	rps=$(heavy "$@")
	sleep 1.2 # the supervisor polls its workers' counters once a second
	c1=$(counts)
	printf '%s\t%s\t%s\t%s\t\t\t%s\n' "$r" "$kind" "$label" "$rps" "$(split "$c0" "$c1")" | tee -a "$results"
}

results="$OUT/steering.tsv"
printf 'round\tsteering\tcase\treq_per_s\tworker_us_per_req\tslow_of_40\tworker_shares\n' >"$results"
for r in $(seq "$ROUNDS"); do
	order="hash auto"
	[ $((r % 2)) -eq 0 ] && order="auto hash" # neither always second
	for mode in $order; do
		start "$mode"
		kind=$(steering)
		measure_heavy "heavy -c 5 -p 2 -w 1" -c 5 -p 2 -w 1
		measure_heavy "heavy -c 20 -p 2 -w 6" -c 20 -p 2 -w 6
		mapfile -t ps < <(pids)
		t0=$(ticks "${ps[@]}")
		out=$(wrk -t1 -c32 -d"${D}s" -H "Connection: close" "$url/api/hello" 2>&1)
		t1=$(ticks "${ps[@]}")
		rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
		reqs=$(awk '/requests in/ {print $1}' <<<"$out")
		us=$(awk -v t=$((t1 - t0)) -v n="$reqs" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}')
		printf '%s\t%s\tnew connection per request (wrk -c32, hello)\t%s\t%s\t\t\n' "$r" "$kind" "$rps" "$us" | tee -a "$results"
		stop
		sleep 1
	done
done
# 3. kill -9 under a long backoff, once per mode.
for mode in hash auto; do
	start "$mode" "$work/backoff.yaml"
	kind=$(steering)
	victim=$(pids | tail -1)
	kill -9 "$victim"
	for i in $(seq 40); do
		curl -s -o /dev/null -m 30 -w '%{time_total}\n' "$url/api/hello" >"$work/t$i" &
	done
	wait $(jobs -p | grep -vx "$sup") 2>/dev/null || true
	slow=$(cat "$work"/t* | awk '$1 > 0.5 {n++} END {print n+0}')
	printf -- '-\t%s\tkill -9 of 1 of %s, restart in 10 s: fresh connections > 0.5 s\t\t\t%s\t\n' "$kind" "$N" "$slow" | tee -a "$results"
	rm -f "$work"/t*
	stop
done
echo "results: $results"
