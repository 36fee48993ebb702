#!/usr/bin/env bash
# The same unmodified Node app, from the same ecosystem.config.js, under PM2's cluster mode
# and under our supervisor, same cores, same N, interleaved rounds: by default the repo's
# own Fastify app with Fastify's defaults (cmd/supervisor/testdata/node/fastify-default.js:
# GET / answers "pid N GREETING", `fastify.listen({port})`), or APP=FILE another one
# answering GET /, or PEER=DIR a heavy PATCH peer (heavy.js, Fastify 5, PATCH
# /api/resource/123, `fastify.listen({port: PORT, host})`) as it is; run by `pm2 start
# ecosystem.config.js` and by `supervisor run -config ecosystem.config.js` (the Node preload
# serves its listen(PORT) from the slot's socket). Both kill after 3 s.
#
#  1. the seed's autocannon command (-m PATCH -b '{"foo1":"bar"}' -c 20 -p 2: req/s, server
#     CPU per request: the whole tree, PM2's God or our supervisor included, from /proc by
#     --server-pid);
#  2. a new connection per request (Connection: close, -c 20), where PM2's primary accepts
#     every connection and hands it to a worker, and ours do not;
#  3. a reload under load (autocannon -c 8): failed requests;
#  4. kill -9 of one worker under load: failed requests, and the time until N are online;
#  5. the manager itself killed with -9 under load (PM2's God daemon, our supervisor), then
#     started again as its user would (`pm2 resurrect` after `pm2 save`; `supervisor run`):
#     failed requests (a new connection per request, -c 16) and the time until served again;
#  6. a new manager binary under load: `pm2 update` (PM2 stops every app and resurrects
#     it); `supervisor upgrade`, which keeps only workers that speak our ipc and refuses
#     an unmodified Node app, whose user then does `supervisor stop` and `run`.
#  7. a reload under keep-alive load (autocannon -c 20, the issue's case): failed requests;
#  8. the env changed in ecosystem.config.js and rolled in under keep-alive load (-c 20):
#     `pm2 reload ecosystem.config.js --update-env`, `supervisor reload -update-env`: failed
#     requests, and (default app) how many of 40 fresh requests after it still answer with
#     the old env (env_stale_of_40) and from how many workers (env_pids).
# CASES=survive runs only 5 and 6; CASES=reload only 7 and 8. The medians per system and
# case are printed at the end (and written beside the rows, medians.tsv).
#
# Usage: bench/pm2-side-by-side.sh   (N=2 D=10 ROUNDS=3 W=1 WARM=2 PM2_VERSION=7
#        APP=cmd/supervisor/testdata/node/fastify-default.js, or PEER=DIR,
#        OUT=data/pm2-side-by-side); needs npm (the app's packages and pm2 into a scratch
#        directory), bin/supervisor and bin/autocannon (make build).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-2}
D=${D:-10}
ROUNDS=${ROUNDS:-3}
W=${W:-1} # autocannon -w: the seed used 6 on a larger load host
WARM=${WARM:-2} # seconds of load before the cases, after each start
APP=${APP:-cmd/supervisor/testdata/node/fastify-default.js}
PEER=${PEER:-}
PM2_VERSION=${PM2_VERSION:-7}
OUT=${OUT:-data/pm2-side-by-side}
BIN=${BIN:-$PWD/bin}
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'PM2_HOME=$work/pm2home "$work/node_modules/.bin/pm2" kill >/dev/null 2>&1 || true; "$BIN/supervisor" stop -socket "$work/s.sock" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
body='{"foo1":"bar"}'
if [ -n "$PEER" ]; then
	cp "$PEER/heavy.js" "$PEER/package.json" "$work/"
	script=heavy.js
	path=/api/resource/123
	req=(-m PATCH -H "Content-Type: application/json" -b "$body")
	creq=(-X PATCH -H 'Content-Type: application/json' -d "$body")
else
	appdir=$(dirname "$APP")
	cp "$APP" "$work/"
	cp "$appdir/package.json" "$work/"
	[ -f "$appdir/package-lock.json" ] && cp "$appdir/package-lock.json" "$work/"
	script=$(basename "$APP")
	path=/
	req=()
	creq=()
fi
# One file for both, as a PM2 user has it; the port comes from the environment so that the
# two systems can run one after the other without waiting for the port. GREETING is the
# env that case 8 changes.
cat >"$work/ecosystem.config.js" <<EOF
module.exports = {
  apps: [{
    name: 'heavy',
    script: './$script',
    instances: $N,
    exec_mode: 'cluster',
    kill_timeout: 3000,
    env: { NODE_ENV: 'production', PORT: Number(process.env.BENCH_PORT), HOST: '127.0.0.1', GREETING: 'first' }
  }]
};
EOF
(cd "$work" && npm install --no-audit --no-fund --silent "pm2@$PM2_VERSION" >/dev/null)
pm2="$work/node_modules/.bin/pm2"
export PM2_HOME="$work/pm2home"
port_pm2=3571
port_ours=3572

ac() { # url extra-args...: JSON summary line
	local url=$1
	shift
	"$BIN/autocannon" -n -j -w "$W" "${req[@]}" "$@" "$url$path"
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
		(cd "$work" && BENCH_PORT=$port_pm2 "$pm2" start ecosystem.config.js >/dev/null)
		root=$(cat "$PM2_HOME/pm2.pid")
		url=http://127.0.0.1:$port_pm2
	else
		(cd "$work" && BENCH_PORT=$port_ours exec "$BIN/supervisor" run -config ecosystem.config.js -socket "$work/s.sock" \
			-log-file "$work/ours.log") &
		root=$!
		url=http://127.0.0.1:$port_ours
	fi
	wait_online "$1"
}
wait_online() { # system: N online and the port listening
	local port=${url##*:}
	for _ in $(seq 400); do
		# Online, and listening: PM2 calls an app that sends no 'ready' online when it has
		# forked it, before its listen().
		if [ "$(online "$1")" = "$N" ] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			return
		fi
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
# served_after t0 url: seconds from t0 until url answers again (empty if not within 20 s).
served_after() {
	for _ in $(seq 1000); do
		if curl -s -o /dev/null -m 0.2 "${creq[@]}" "$2$path"; then
			python3 -c "import time; print('%.2f' % (time.time() - $1))"
			return
		fi
		sleep 0.02
	done
}
# manager_kill9 system: kill -9 of PM2's God daemon or of our supervisor, then started again.
manager_kill9() {
	if [ "$1" = pm2 ]; then
		"$pm2" save >/dev/null 2>&1
		kill -9 "$(cat "$PM2_HOME/pm2.pid")"
		(cd "$work" && BENCH_PORT=$port_pm2 "$pm2" resurrect >/dev/null 2>&1)
		root=$(cat "$PM2_HOME/pm2.pid")
	else
		kill -9 "$root"
		wait "$root" 2>/dev/null || true
		(cd "$work" && BENCH_PORT=$port_ours exec "$BIN/supervisor" run -config ecosystem.config.js -socket "$work/s.sock" \
			-log-file "$work/ours.log") &
		root=$!
	fi
}
# new_binary system: what each offers for a new version of itself; sets how (what was
# done). Not in a $(...): a supervisor started there would hold its output open.
new_binary() {
	if [ "$1" = pm2 ]; then
		(cd "$work" && BENCH_PORT=$port_pm2 "$pm2" update >/dev/null 2>&1)
		root=$(cat "$PM2_HOME/pm2.pid")
		how="pm2 update"
	elif "$BIN/supervisor" upgrade -socket "$work/s.sock" >"$work/upgrade.out" 2>&1; then
		how="supervisor upgrade"
	else
		"$BIN/supervisor" stop -socket "$work/s.sock" >/dev/null 2>&1 || true
		wait "$root" 2>/dev/null || true
		(cd "$work" && BENCH_PORT=$port_ours exec "$BIN/supervisor" run -config ecosystem.config.js -socket "$work/s.sock" \
			-log-file "$work/ours.log") &
		root=$!
		how="upgrade refused ($(head -c 120 "$work/upgrade.out" | tr '\t\n' '  ')), stop and run"
	fi
}
reload() { # system
	if [ "$1" = pm2 ]; then "$pm2" reload heavy >/dev/null; else "$BIN/supervisor" reload -socket "$work/s.sock" >/dev/null; fi
}
# reload_env system greeting: GREETING changed in the file and rolled in, as each system's
# user does it (PM2 evaluates the file in its CLI: BENCH_PORT is given again).
reload_env() {
	sed -i "s/GREETING: '[^']*'/GREETING: '$2'/" "$work/ecosystem.config.js"
	if [ "$1" = pm2 ]; then
		(cd "$work" && BENCH_PORT=$port_pm2 "$pm2" reload ecosystem.config.js --update-env >/dev/null)
	else
		"$BIN/supervisor" reload -update-env -socket "$work/s.sock" >/dev/null
	fi
}
# env_served greeting: of 40 fresh requests, how many answer without greeting, and from
# how many workers the answers came ("-" for a PEER app, which does not show its env).
env_served() {
	if [ -n "$PEER" ]; then
		printf -- '-\t-'
		return
	fi
	for _ in $(seq 40); do echo "$(curl -s -m 2 "$url$path")"; done >"$work/env.out" # a failure: an empty line
	printf '%s\t%s' "$(grep -cv " $1\$" "$work/env.out")" "$(grep -o '^pid [0-9]*' "$work/env.out" | sort -u | wc -l)"
}

results="$OUT/pm2-side-by-side.tsv"
printf 'round\tsystem\tcase\treq_per_s\tfailed\tserver_cpu_us_per_req\tback_after_s\tenv_stale_of_40\tenv_pids\n' >"$results"
row() { printf '%s\t%s\t%s\t%s\n' "$r" "$1" "$2" "$3" | tee -a "$results"; }
for r in $(seq "$ROUNDS"); do
	order="pm2 ours"
	[ $((r % 2)) -eq 0 ] && order="ours pm2"
	for sys in $order; do
		start "$sys"
		ac "$url" -c 20 -d "$WARM" >/dev/null # warm-up (Node's JIT; PM2's daemon settling after its start)
		if [ "${CASES:-all}" = survive ] || [ "${CASES:-all}" = all ]; then
			ac "$url" -c 16 -d 8 -H "Connection: close" >"$work/kill9.json" &
			loadpid=$!
			sleep 2
			t0=$(date +%s.%N)
			manager_kill9 "$sys"
			back=$(served_after "$t0" "$url")
			wait "$loadpid"
			row "$sys" "the manager killed -9 and started again, new connection per request, -c 16" "$(summary <"$work/kill9.json")	$back"
			wait_online "$sys" # all N online before the next case
			ac "$url" -c 16 -d 8 -H "Connection: close" >"$work/update.json" &
			loadpid=$!
			sleep 2
			t0=$(date +%s.%N)
			new_binary "$sys"
			back=$(served_after "$t0" "$url")
			wait "$loadpid"
			row "$sys" "a new manager binary ($how), new connection per request, -c 16" "$(summary <"$work/update.json")	$back"
			wait_online "$sys"
		fi
		if [ "${CASES:-all}" = survive ]; then
			stop "$sys"
			continue
		fi
		if [ "${CASES:-all}" = reload ] || [ "${CASES:-all}" = all ]; then
			ac "$url" -c 20 -d "$D" >"$work/reload-ka.json" &
			loadpid=$!
			sleep 2
			reload "$sys"
			wait "$loadpid"
			row "$sys" "reload under keep-alive load, -c 20" "$(summary <"$work/reload-ka.json")		"
			greeting="round$r-$sys"
			ac "$url" -c 20 -d "$D" >"$work/update-env.json" &
			loadpid=$!
			sleep 2
			reload_env "$sys" "$greeting"
			wait "$loadpid"
			row "$sys" "reload --update-env under keep-alive load, -c 20" "$(summary <"$work/update-env.json")		$(env_served "$greeting")"
		fi
		if [ "${CASES:-all}" = reload ]; then
			stop "$sys"
			continue
		fi
		row "$sys" "the seed's command, -c 20 -p 2" "$(ac "$url" -c 20 -p 2 -d "$D" --server-pid "$root" | summary)	"
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
# Medians per system and case, of every numeric column.
python3 - "$results" >"$OUT/medians.tsv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
cols = [c for c in rows[0] if c not in ("round", "system", "case")] if rows else []
print("case\tsystem\trounds\t" + "\t".join("median_" + c for c in cols))
for case in dict.fromkeys(r["case"] for r in rows):
    for system in ("pm2", "ours"):
        rs = [r for r in rows if r["case"] == case and r["system"] == system]
        if not rs:
            continue
        med = []
        for c in cols:
            v = [float(r[c]) for r in rs if (r.get(c) or "").replace(".", "", 1).isdigit()]
            med.append("%g" % statistics.median(v) if v else "")
        print("%s\t%s\t%d\t%s" % (case, system, len(rs), "\t".join(med)))
PY
cat "$OUT/medians.tsv"
echo "results: $results"
