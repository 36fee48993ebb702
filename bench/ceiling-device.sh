#!/usr/bin/env bash
# bench/ceiling-device.sh: the full single-host ceiling sweep (docs/ceiling.md) on a bare
# 16-core machine, from prebuilt static binaries; everything it learns lands under $OUT.
#
# Needs, in bin/: ceiling, supervisor, worker, autocannon (static: CGO_ENABLED=0) and wrk
# with its libraries in bin/lib; the repository's configs/cluster.yaml and bench/mix.lua.
# No Go, curl, tc or taskset: `ceiling pin` pins, `ceiling nic` shapes loopback itself.
# Build them here with (stripped, so bin/ travels in under 64 MiB):
#
#   CGO_ENABLED=0 go build -ldflags='-s -w' -o bin/ ./cmd/ceiling ./cmd/supervisor ./cmd/worker ./bench/autocannon
#
# Layout: servers on cores 0..N-1 for N in NS (1,2,4,8,12), the generator on GEN_CPUS
# (12-15). 3 s measured + 1 s warm-up per run, five workloads, the cluster and one
# GOMAXPROCS=N process; then one few-connection run on 12 workers (the
# article's -c 5) for SO_REUSEPORT's hash imbalance; then heavy and static behind emulated
# NICs (root only; skipped otherwise); then the model and its plots. Total budget: 8 min.
#
# Usage: OUT=/path bench/ceiling-device.sh   (env below overrides the layout)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/ceiling-out}
NS=${NS:-1,2,4,8,12}
GEN_CPUS=${GEN_CPUS:-12-15}
DUR=${DUR:-3}
WARM=${WARM:-1}
WORKLOADS=${WORKLOADS:-hello,static,feed,heavy,mix}
MODES=${MODES:-cluster,single}
IMB_N=${IMB_N:-12}
IMB_CONNS=${IMB_CONNS:-5}
NIC_N=${NIC_N:-4}
NIC_RATES=${NIC_RATES:-100mbit,1gbit,10gbit,25gbit}
NIC_WORKLOADS=${NIC_WORKLOADS:-heavy,static}
BUDGET=${BUDGET:-480}
export LD_LIBRARY_PATH=$PWD/bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export JWT_SECRET=${JWT_SECRET:-twelve-dollar-challenge}

count() { tr ',' '\n' <<<"$1" | grep -c .; }
n_ns=$(count "$NS"); n_modes=$(count "$MODES"); n_wl=$(count "$WORKLOADS")
n_rates=$(count "$NIC_RATES"); n_nicwl=$(count "$NIC_WORKLOADS")
runs=$((n_ns * n_modes * n_wl)); nic_runs=$((n_rates * n_nicwl))
per=$((DUR + WARM + 1))  # +1: probe, /proc snapshots, status calls
# seed ~15 s; each server start copies 250 MB and waits for its workers (~3 s);
# the imbalance run waits out the supervisor's 1 s polling twice.
est=$((15 + runs * per + n_ns * n_modes * 3 + (DUR + WARM + 4) + nic_runs * per + 5 + 2))
echo "ceiling-device: $runs sweep runs + 1 imbalance run + $nic_runs NIC runs of ${DUR}s (+${WARM}s warm-up)"
echo "ceiling-device: estimated total ${est} s (budget ${BUDGET} s)"
if [ "$est" -gt "$BUDGET" ]; then
  echo "ceiling-device: the estimate exceeds the budget: lower DUR, NS or WORKLOADS" >&2
  exit 1
fi

for b in ceiling supervisor worker autocannon wrk; do
  [ -x "bin/$b" ] || { echo "ceiling-device: bin/$b is missing (see the build command at the top)" >&2; exit 1; }
done
wrkv=$(bin/wrk -v 2>&1 || true)
grep -q '^wrk ' <<<"$wrkv" || { echo "ceiling-device: bin/wrk does not run (libraries in bin/lib?): $wrkv" >&2; exit 1; }

mkdir -p "$OUT"
WORK=$(mktemp -d) # not under $OUT: every server start copies the 250 MB seed here
trap 'rm -rf "$WORK"' EXIT
{
  echo "date: $(date -u +%FT%TZ)"
  echo "cpus: $(nproc) online of $(grep -c ^processor /proc/cpuinfo)"
  echo "model: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "kernel: $(uname -r) ($(uname -m))"
  echo "memory: $(grep MemTotal /proc/meminfo)"
  echo "threads per core: $(cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list 2>/dev/null || echo unknown) (siblings of cpu0)"
  echo "nofile: soft $(ulimit -Sn) hard $(ulimit -Hn)"
  echo "euid: $(id -u)"
  echo "layout: NS=$NS GEN_CPUS=$GEN_CPUS DUR=$DUR WARM=$WARM NIC_N=$NIC_N NIC_RATES=$NIC_RATES"
} | tee "$OUT/machine.txt"
if [ "$(nproc)" -lt 16 ]; then
  echo "ceiling-device: warning: $(nproc) cpus, the layout assumes 16 (set NS and GEN_CPUS)" >&2
fi

start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
left() { echo $(( BUDGET - $(elapsed) )); }
# The orchestration itself is not pinned (pinning it would narrow the cores it may hand
# out); it sleeps in wait() while a generator runs.
CEIL=(bin/ceiling)
common=(-work "$WORK/run" -seed "$WORK/seed.db" -tokens "$WORK/tokens.json" -gen-cpus "$GEN_CPUS"
  -d "${DUR}s" -warmup "${WARM}s")

t=$(date +%s)
bin/worker seed -db "$WORK/seed.db" -tokens "$WORK/tokens.json" 2>"$OUT/seed.log"
echo "ceiling-device: seed generated in $(( $(date +%s) - t )) s"

# timeout (coreutils) stops a hung stage and keeps the runs written so far.
tmo() { if command -v timeout >/dev/null; then timeout --signal=TERM --kill-after=20 "$@"; else shift; "$@"; fi; }

tmo "$(( $(left) - 60 ))" "${CEIL[@]}" sweep -out "$OUT" "${common[@]}" -n "$NS" -modes "$MODES" \
  -workloads "$WORKLOADS" -imbalance-n "$IMB_N" -imbalance-conns "$IMB_CONNS" 2>&1 | tee "$OUT/sweep.log" || true
echo "ceiling-device: sweep done at $(elapsed) s"

if [ "$(left)" -gt $((nic_runs * per + 20)) ]; then
  tmo "$(( $(left) - 10 ))" "${CEIL[@]}" nic -out "$OUT" "${common[@]}" -n "$NIC_N" -rates "$NIC_RATES" \
    -workloads "$NIC_WORKLOADS" 2>&1 | tee "$OUT/nic.log" || true
else
  echo "ceiling-device: NIC runs skipped: $(left) s left" | tee "$OUT/nic.log"
fi
echo "ceiling-device: nic done at $(elapsed) s"

bin/ceiling model -results "$OUT" -cores 12 -nic 10g >"$OUT/model.txt" 2>&1 || true
tail -n 8 "$OUT/model.txt"
grep -h '^workload=' "$OUT/sweep.log" "$OUT/nic.log" >"$OUT/lines.txt" || true
echo "ceiling-device: finished in $(elapsed) s; results in $OUT (sweep/, nic/, model.md, plots/)"
