#!/usr/bin/env bash
# The unit (configs/onehost.service, as shipped) under a real systemd: a Debian tree made by
# debootstrap, booted with systemd-nspawn, the cluster started by systemctl, then, each under
# load through a new connection per request (autocannon -c 8 -H Connection: close, 6 s):
#   1. kill -9 of the supervisor (MAINPID): Restart= starts a new one; with KillMode=process
#      the workers live on and are adopted (same pids, shown adopted);
#   2. systemctl restart: the slots' sockets wait in the file descriptor store;
#   3. systemctl stop: nothing of the unit left.
# Usage (root; needs systemd-container and debootstrap from Debian, make build):
#   bench/systemd-nspawn.sh        (TREE=/var/lib/machines/onehost OUT=data/systemd-nspawn)
set -euo pipefail
cd "$(dirname "$0")/.."
TREE=${TREE:-/var/lib/machines/onehost}
OUT=${OUT:-data/systemd-nspawn}
mkdir -p "$OUT"
[ -x "$TREE/lib/systemd/systemd" ] ||
	debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus bookworm "$TREE" http://deb.debian.org/debian >/dev/null
install -d "$TREE/opt/onehost/bin" "$TREE/opt/onehost/configs" "$TREE/etc/onehost"
cp bin/supervisor bin/worker bin/autocannon "$TREE/opt/onehost/bin/"
cp configs/cluster.yaml "$TREE/opt/onehost/configs/"
cp configs/onehost.service "$TREE/etc/systemd/system/"
sed -i 's/^instances: .*/instances: 2/' "$TREE/opt/onehost/configs/cluster.yaml"
cp data/seed.db "$TREE/opt/onehost/feed.db"
head -c 32 /dev/urandom | base64 >"$TREE/etc/onehost/jwt-secret"
chmod 600 "$TREE/etc/onehost/jwt-secret"
systemd-nspawn -q -D "$TREE" --boot --register=no --keep-unit >"$OUT/boot.log" 2>&1 &
nspawn=$!
trap 'kill $nspawn 2>/dev/null; wait $nspawn 2>/dev/null' EXIT
init=
for _ in $(seq 100); do
	init=$(pgrep -P "$nspawn" -x systemd || true)
	[ -n "$init" ] && break
	sleep 0.1
done
[ -n "$init" ] || { echo "the container's systemd did not start: $OUT/boot.log" >&2; exit 1; }
inside() { nsenter -t "$init" -a -- "$@"; }
for _ in $(seq 100); do
	inside systemctl is-system-running 2>/dev/null | grep -Eq 'running|degraded' && break
	sleep 0.2
done
inside sh -c 'id onehost >/dev/null 2>&1 || useradd -r onehost; install -d -o onehost -g onehost /var/lib/onehost;
	install -o onehost -g onehost /opt/onehost/feed.db /var/lib/onehost/feed.db; systemctl daemon-reload'
inside systemctl start onehost
st() { # the table, once the supervisor answers (up to 20 s)
	for _ in $(seq 100); do
		inside /opt/onehost/bin/supervisor status -socket /run/onehost/supervisor.sock 2>/dev/null && return
		sleep 0.2
	done
	echo "no supervisor answers" >&2
}
pids() { st >/dev/null; inside /opt/onehost/bin/supervisor status -json -socket /run/onehost/supervisor.sock | grep -o '"pid":[0-9]*' | cut -d: -f2 | tr '\n' ' ' || true; }
load() { inside /opt/onehost/bin/autocannon -n -j -c 8 -d 6 -H "Connection: close" http://127.0.0.1:3000/health >"$OUT/$1.json"; }
failed() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%d ok, %d failed" % (d["2xx"], d["errors"]+d["timeouts"]+d["non2xx"]+d["resets"]))' "$OUT/$1.json"; }
st | tee "$OUT/status-start.txt"
before=$(pids)
load kill9 &
loadpid=$!
sleep 2
main=$(inside systemctl show -p MainPID --value onehost)
inside sh -c "kill -9 $main"
wait "$loadpid" || true
sleep 1
after=$(pids)
st | tee "$OUT/status-after-kill9.txt"
echo "kill -9 of the supervisor ($main -> $(inside systemctl show -p MainPID --value onehost)): $(failed kill9); workers $before-> $after" | tee "$OUT/summary.txt"
load restart &
loadpid=$!
sleep 2
inside systemctl restart onehost
wait "$loadpid" || true
echo "systemctl restart: $(failed restart); workers -> $(pids)" | tee -a "$OUT/summary.txt"
inside systemctl stop onehost || true
inside journalctl -u onehost --no-pager >"$OUT/journal.txt" 2>&1 || true
# (minbase has no procps: the unit's processes are its cgroup's, and any process named worker)
left=$(inside sh -c 'cg=$(systemctl show -p ControlGroup --value onehost); for d in /sys/fs/cgroup/unified /sys/fs/cgroup/systemd /sys/fs/cgroup; do
	[ -n "$cg" ] && [ -f "$d$cg/cgroup.procs" ] && cat "$d$cg/cgroup.procs" && break; done; grep -lx worker /proc/[0-9]*/comm 2>/dev/null; true' | sort -u | wc -l)
echo "systemctl stop: $left processes of the unit left; state $(inside systemctl is-active onehost || true)" | tee -a "$OUT/summary.txt"
inside journalctl -u onehost --no-pager >"$OUT/journal.txt" 2>&1 || true
