#!/usr/bin/env bash
# bench/ceiling-device.sh: the single-host ceiling sweep (docs/ceiling.md) on a bare
# 16-core machine (no Go, apt or network), from the payload bench/ceiling-device-pack.sh
# prepares in .device/. Everything it learns lands under $OUT: ONE tarball, results.tgz
# (the sweeps' ceiling.json and runs.jsonl, the logs, the model and plots), and beside it
# lines.txt (one line per run and per cell's median), model.md, machine.txt, run.log.
#
# The lead's device command (the repository root is the working directory there):
#
#   run(command="CARRY=.device bash bench/ceiling-device.sh", carry=[".device"], timeout_s=540)
#
# after, here: PEER_HEAVY=/path/to/node-heavy bench/ceiling-device-pack.sh
#
# Layout, as on 2026-12-04 (docs/results/16cores-2026-12-04): sweep A, N in NA (1,4,8),
# servers on cores 0..N-1, the generator on GA (8-15); sweep B, N in NB (12), generator on GB
# (12-15), plus the 5-connection imbalance run; modes cluster, single, pm2 (heavy only) and
# nginx (static only); each sweep REPEAT (3) interleaved rounds, the medians in the model.
# Then heavy and static behind emulated NICs at NIC_N (4) workers, NIC_RATES; then
# `ceiling model` over all of it (12 cores, 10 GbE).
#
# Budget: the whole script must finish in under 8 minutes. On that machine a run cost
# DUR + WARM + 0.4 s (server starts included: 48 runs of 3+1 s took 211 s) and the seed 15-21
# s. The default: 3 rounds x 4 N x (cluster 3 + single 3 + pm2 1 + nginx 1) = 96 runs of
# 2+1 s, about 330 s, plus the imbalance run, 8 NIC runs (~30 s), unpacking, seed and model
# (~35 s): about 400 s, 6.7 min. One round of everything at DUR=3 (the 2026-12-04 runs) is
# 5 workloads and N 1,2,4,8,12: 61 runs, ~270 s; two such rounds would not fit. The
# script prints its estimate for the env given and stops before starting when over BUDGET.
#
# Test here at N = 1 (servers on core 0, the generator on core 1):
#   NA=1 GA=1 NB= NIC_RATES= DUR=1 REPEAT=2 OUT=/tmp/devout CARRY=$PWD/.device bash bench/ceiling-device.sh
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
CARRY=${CARRY:-.device}; [[ $CARRY = /* ]] || CARRY=$REPO/$CARRY
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
W=${WORKDIR:-/tmp/ceiling-device}
NA=${NA-1,4,8}; GA=${GA:-8-15}
NB=${NB-12}; GB=${GB:-12-15}
IMB_CONNS=${IMB_CONNS:-5}
MODES=${MODES:-cluster,single,pm2,nginx}
WORKLOADS=${WORKLOADS:-heavy,feed,static}
REPEAT=${REPEAT:-3}; DUR=${DUR:-2}; WARM=${WARM:-1}
NIC_N=${NIC_N:-4}; NIC_RATES=${NIC_RATES-100mbit,1gbit,10gbit,25gbit}; NIC_WORKLOADS=${NIC_WORKLOADS:-heavy,static}
BUDGET=${BUDGET:-470}
exec > >(tee -a "$OUT/run.log") 2>&1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }

# The estimate, before anything runs (see Budget above).
count() { tr ',' '\n' <<<"$1" | grep -c . || true; }
perN=0
for m in ${MODES//,/ }; do
  case $m in
    pm2) grep -qw heavy <<<"${WORKLOADS//,/ }" && perN=$((perN + 1)) ;;
    nginx) grep -qw static <<<"${WORKLOADS//,/ }" && perN=$((perN + 1)) ;;
    *) perN=$((perN + $(count "$WORKLOADS"))) ;;
  esac
done
runs=$(( REPEAT * perN * ($(count "$NA") + $(count "$NB")) ))
nic=$(( $(count "$NIC_RATES") * $(count "$NIC_WORKLOADS") ))
est=$(( (runs + nic + 1) * (DUR + WARM) + (runs + nic) * 4 / 10 + 40 ))
echo "ceiling-device: $runs sweep runs ($REPEAT rounds) + $nic NIC runs of ${DUR}s (+${WARM}s warm-up): about ${est} s (budget ${BUDGET} s)"
if [ "$est" -gt "$BUDGET" ]; then
  echo "ceiling-device: over the budget: lower REPEAT, DUR, NA or WORKLOADS" >&2
  exit 1
fi

rm -rf "$W"; mkdir -p "$W"
[ -f "$CARRY/payload.tar.xz" ] || { echo "ceiling-device: no $CARRY/payload.tar.xz (bench/ceiling-device-pack.sh makes it)" >&2; exit 1; }
if command -v xz >/dev/null; then xz -dc "$CARRY/payload.tar.xz" | tar -C "$W" -xf -
else python3 -c 'import lzma,sys,shutil;shutil.copyfileobj(lzma.open(sys.argv[1]),sys.stdout.buffer)' "$CARRY/payload.tar.xz" | tar -C "$W" -xf -; fi
echo "ceiling-device: unpacked at $(el) s"
export PATH=$W/nodebin:$W/bin:$PATH LD_LIBRARY_PATH=$W/bin/lib PM2_HOME=$W/.pm2
export JWT_SECRET=${JWT_SECRET:-twelve-dollar-challenge}
ulimit -n 1048576 2>/dev/null || ulimit -n 65536 2>/dev/null || true
{
  echo "date: $(date -u +%FT%TZ)"; echo "nproc: $(nproc)"
  grep -m1 'model name' /proc/cpuinfo
  for c in 0 1 8 12; do echo "cpu$c siblings: $(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list 2>/dev/null)"; done
  echo "kernel: $(uname -r)"; grep MemTotal /proc/meminfo; echo "nofile: $(ulimit -n)"; echo "euid: $(id -u)"
  echo "node: $(node --version 2>&1)"; echo "wrk: $(wrk -v 2>&1 | head -1)"; echo "nginx: $(nginx -v 2>&1)"
  echo "pm2: $("$W/peerheavy/node_modules/.bin/pm2" --version 2>&1 | tail -1)"
  echo "layout: NA=$NA GA=$GA NB=$NB GB=$GB MODES=$MODES WORKLOADS=$WORKLOADS REPEAT=$REPEAT DUR=$DUR WARM=$WARM NIC_N=$NIC_N NIC_RATES=$NIC_RATES"
} | tee "$OUT/machine.txt"
B=$W/bin
"$B/worker" seed -db "$W/seed.db" -tokens "$W/tokens.json" >"$W/seed.log" 2>&1 || { tail -5 "$W/seed.log"; exit 1; }
echo "ceiling-device: seeded at $(el) s"

common=(-seed "$W/seed.db" -tokens "$W/tokens.json" -d "${DUR}s" -warmup "${WARM}s"
  -supervisor "$B/supervisor" -worker "$B/worker" -autocannon "$B/autocannon" -wrk "$B/wrk"
  -config "$REPO/configs/cluster.yaml" -mix-script "$REPO/bench/mix.lua")
sweep=(-modes "$MODES" -workloads "$WORKLOADS" -repeat "$REPEAT" -peer-heavy "$W/peerheavy"
  -pm2 "$W/peerheavy/node_modules/.bin/pm2" -nginx "$B/nginx" -nginx-conf "$REPO/configs/nginx/static.conf"
  -static-root "$REPO/internal/shop/static")
# timeout stops a hung stage and keeps the runs written so far.
to() { timeout --signal=TERM --kill-after=15 "$@"; }
left() { echo $(( BUDGET - $(el) )); }
R=$W/res; mkdir -p "$R"; results=()
if [ -n "$NA" ]; then
  to "$(( $(left) - 20 ))" "$B/ceiling" sweep -out "$R/a" -work "$W/wa" "${common[@]}" "${sweep[@]}" -n "$NA" -gen-cpus "$GA" \
    -imbalance-n 0 >"$R/a.log" 2>&1; echo "ceiling-device: sweep a rc=$? at $(el) s"; results+=("$R/a")
fi
if [ -n "$NB" ]; then
  to "$(( $(left) - 15 ))" "$B/ceiling" sweep -out "$R/b" -work "$W/wb" "${common[@]}" "${sweep[@]}" -n "$NB" -gen-cpus "$GB" \
    -imbalance-n "${NB##*,}" -imbalance-conns "$IMB_CONNS" >"$R/b.log" 2>&1; echo "ceiling-device: sweep b rc=$? at $(el) s"; results+=("$R/b")
fi
if [ -n "$NIC_RATES" ]; then
  to "$(( $(left) - 8 ))" "$B/ceiling" nic -out "$R/nic" -work "$W/wn" "${common[@]}" -n "$NIC_N" -gen-cpus "$GA" \
    -rates "$NIC_RATES" -workloads "$NIC_WORKLOADS" >"$R/nic.log" 2>&1; echo "ceiling-device: nic rc=$? at $(el) s"
  [ -f "$R/nic/nic/ceiling.json" ] && results+=("$R/nic")
fi
(IFS=,; "$B/ceiling" model -results "${results[*]}" -cores 12 -nic 10g -report "$R/model.md" -plots "$R/plots" >"$R/model.txt" 2>&1)
echo "ceiling-device: model rc=$? at $(el) s"
grep -h '^workload=\|^median \|^peer=\|^ceiling sweep: next' "$R"/*.log >"$OUT/lines.txt" 2>/dev/null
cp "$R/model.md" "$OUT/" 2>/dev/null
tar -C "$W" -czf "$OUT/results.tgz" res
echo "ceiling-device: done at $(el) s: $OUT/results.tgz ($(du -h "$OUT/results.tgz" | cut -f1)), lines.txt, model.md, machine.txt"
