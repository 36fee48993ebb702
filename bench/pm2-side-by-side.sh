#!/usr/bin/env bash
# The same Node app under PM2's cluster mode and under our supervisor, same cores, same N,
# interleaved rounds: the heavy PATCH peer (../shared/peers/node-heavy, Fastify), changed
# only to listen on fd 3 when LISTEN_FDS is set and to send 'ready'. Both wait for it
# (pm2 --wait-ready; wait_ready: true), both kill after 3 s.
#
#  1. keep-alive clients: autocannon -c 20 (req/s, server CPU per request: the whole tree,
#     PM2's God or our supervisor included, from /proc by --server-pid);
#  2. a new connection per request (Connection: close), where PM2's primary accepts every
#     connection and hands it to a worker, and ours do not;
#  3. a reload under load (autocannon -c 8): failed requests;
#  4. kill -9 of one worker under load: failed requests, and the time until N are online.
#
# Usage: bench/pm2-side-by-side.sh   (N=2 D=10 ROUNDS=3 PEER=../shared/peers/node-heavy
#        OUT=data/pm2-side-by-side); needs npm (fastify, pm2 into a scratch directory),
#        make build.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-2}
D=${D:-10}
ROUNDS=${ROUNDS:-3}
PEER=${PEER:-../shared/peers/node-heavy}
OUT=${OUT:-data/pm2-side-by-side}
BIN=${BIN:-$PWD/bin}
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'PM2_HOME=$work/pm2home "$work/node_modules/.bin/pm2" kill >/dev/null 2>&1 || true; "$BIN/supervisor" stop -socket "$work/s.sock" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
cp "$PEER/heavy.js" "$PEER/package.json" "$work/"
# The two changes: the inherited socket under LISTEN_FDS, and 'ready' once listening.
python3 - "$work/heavy.js" <<'EOF'
import sys
p = sys.argv[1]
s = open(p).read()
old = "fastify.listen({ port: Number(process.env.PORT), host: '127.0.0.1' });"
assert old in s, "node-heavy changed: update bench/pm2-side-by-side.sh"
s = s.replace(old, """const ready = () => { if (process.send) process.send('ready'); };
if (process.env.LISTEN_FDS) fastify.ready().then(() => fastify.server.listen({ fd: 3 }, ready));
else fastify.listen({ port: Number(process.env.PORT), host: '127.0.0.1' }).then(ready);""")
open(p, "w").write(s)
EOF
(cd "$work" && npm install --no-audit --no-fund --silent pm2@6 >/dev/null)
pm2="$work/node_modules/.bin/pm2"
export PM2_HOME="$work/pm2home"
printf 'wait_ready: true\nlisten_timeout: 5s\nkill_timeout: 3s\n' >"$work/cluster.yaml"
port_pm2=3571
port_ours=3572

body='{"foo1":"bar"}'
ac() { # url extra-args...: JSON summary line
	local url=$1
	shift
	"$BIN/autocannon" -n -j -m PATCH -H "Content-Type: application/json" -b "$body" "$@" "$url/api/resource/123"
}
summary() { # json: req/s errors cpu_us_per_req
	python3 -c 'import json,sys
d = json.load(sys.stdin)
ok = d["2xx"]; bad = d["errors"] + d["timeouts"] + d["non2xx"] + d["resets"]
cpu = (d.get("server") or {}).get("cpu_us_per_req", 0)
print("%.0f\t%d\t%.1f" % (ok / d["duration"], bad, cpu))'
}
online() { # system: how many workers are online
	if [ "$1" = pm2 ]; then
		"$pm2" jlist 2>/dev/null | python3 -c 'import json,sys; print(sum(1 for p in json.load(sys.stdin) if p["pm2_env"]["status"] == "online"))'
	else
		"$BIN/supervisor" status -json -socket "$work/s.sock" 2>/dev/null | grep -o '"status":"online"' | wc -l
	fi
}
worker_pids() { # system: the workers' pids, one per line
	if [ "$1" = pm2 ]; then
		"$pm2" jlist 2>/dev/null | python3 -c 'import json,sys; [print(p["pid"]) for p in json.load(sys.stdin)]'
	else
		"$BIN/supervisor" status -json -socket "$work/s.sock" 2>/dev/null | grep -o '"pid":[0-9]*' | cut -d: -f2
	fi
}
start() { # system
	if [ "$1" = pm2 ]; then
		(cd "$work" && PORT=$port_pm2 "$pm2" start heavy.js -i "$N" --name heavy --wait-ready --listen-timeout 5000 --kill-timeout 3000 >/dev/null)
		root=$(cat "$PM2_HOME/pm2.pid")
		url=http://127.0.0.1:$port_pm2
	else
		"$BIN/supervisor" run -config "$work/cluster.yaml" -socket "$work/s.sock" -instances "$N" \
			-listen 127.0.0.1:$port_ours -log-file "$work/ours.log" -- node "$work/heavy.js" &
		root=$!
		url=http://127.0.0.1:$port_ours
	fi
	for _ in $(seq 200); do
		[ "$(online "$1")" = "$N" ] && return
		sleep 0.05
	done
	echo "$1 did not come online" >&2
	exit 1
}
stop() { # system
	if [ "$1" = pm2 ]; then
		"$pm2" kill >/dev/null 2>&1 || true
	else
		"$BIN/supervisor" stop -socket "$work/s.sock" >/dev/null 2>&1 || true
		wait "$root" 2>/dev/null || true
	fi
	sleep 1
}
reload() { # system
	if [ "$1" = pm2 ]; then "$pm2" reload heavy >/dev/null; else "$BIN/supervisor" reload -socket "$work/s.sock" >/dev/null; fi
}

results="$OUT/pm2-side-by-side.tsv"
printf 'round\tsystem\tcase\treq_per_s\tfailed\tserver_cpu_us_per_req\tback_after_s\n' >"$results"
row() { printf '%s\t%s\t%s\t%s\n' "$r" "$1" "$2" "$3" | tee -a "$results"; }
for r in $(seq "$ROUNDS"); do
	order="pm2 ours"
	[ $((r % 2)) -eq 0 ] && order="ours pm2"
	for sys in $order; do
		start "$sys"
		ac "$url" -c 20 -d 2 >/dev/null # warm-up (Node's JIT)
		row "$sys" "keep-alive, -c 20" "$(ac "$url" -c 20 -d "$D" --server-pid "$root" | summary)	"
		row "$sys" "new connection per request, -c 20" "$(ac "$url" -c 20 -d "$D" -H "Connection: close" --server-pid "$root" | summary)	"
		ac "$url" -c 8 -d 8 >"$work/reload.json" &
		sleep 2
		reload "$sys"
		wait $!
		row "$sys" "reload under load, -c 8" "$(summary <"$work/reload.json")	"
		ac "$url" -c 8 -d 8 >"$work/crash.json" &
		loadpid=$!
		sleep 2
		victim=$(worker_pids "$sys" | sed -n 1p)
		t0=$(date +%s.%N)
		kill -9 "$victim"
		back=
		for _ in $(seq 400); do # N online again, none of them the victim
			sleep 0.02
			if [ "$(online "$sys")" = "$N" ] && ! worker_pids "$sys" | grep -x "$victim" >/dev/null; then
				back=$(python3 -c "import time; print('%.2f' % (time.time() - $t0))")
				break
			fi
		done
		wait "$loadpid"
		row "$sys" "kill -9 of one worker under load, -c 8" "$(summary <"$work/crash.json")	$back"
		stop "$sys"
	done
done
echo "results: $results"
