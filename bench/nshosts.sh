#!/bin/sh
# bench/nshosts.sh up N | down: N load "hosts" made of network namespaces (nshostI),
# each joined to this one by a veth pair (10.232.0.4I+1 here, 10.232.0.4I+2 there, its
# default route back here) with Debian's sshd on its address, port 2222, a key made for
# them in /tmp/nshosts. `up` prints the -load-hosts flags for ceiling challenge/sweep; the
# server listens on 10.232.0.1, which every host reaches. The same layout as the tests'
# (internal/loadhosts/nstest), for measuring by hand. Root; needs iproute2, openssh-server.
# CPUS=0 bench/nshosts.sh up 2 starts each sshd under `taskset -c 0`: whatever it runs (the
# generators) inherits the affinity, so on one machine the "hosts" keep off the server's core
# as a local generator pinned with -gen-cpus does. TW_REUSE=1 sets net.ipv4.tcp_tw_reuse=1 in
# each host's namespace (the default, 2, lets connect() reuse a TIME_WAIT port on loopback
# only: a search's trials over a veth, one source address each, then run into the connect()
# cliff of docs/bench.md at ~14,000 ports, the previous trial's TIME_WAIT included).
# SSHD=0 bench/nshosts.sh up 2 makes the hosts without sshd (a fleet's hosts behind a
# balancer here, docs/fleet.md "Running a fleet by hand: the host side": each runs its own
# `supervisor run` under `ip netns exec nshostI`) and prints one line per host, its
# namespace and address. `down` removes every nshostI there is, whatever N.
set -eu
cmd=${1:?usage: nshosts.sh up N | down}; n=${2:-2}; d=/tmp/nshosts; sshd=${SSHD:-1}
if [ "$cmd" = down ]; then
	for ns in $(ip netns list | sed -n 's/^\(nshost[0-9][0-9]*\).*/\1/p'); do
		i=${ns#nshost}
		[ -f $d/h$i/sshd.pid ] && kill "$(cat $d/h$i/sshd.pid)" 2>/dev/null || true
		ip link del nsh${i}a 2>/dev/null || true
		ip netns del $ns
	done
	rm -rf $d
	exit 0
fi
[ "$cmd" = up ] || { echo "usage: nshosts.sh up N | down" >&2; exit 2; }
if ip netns list | grep -q '^nshost[0-9]'; then
	echo "nshosts.sh: hosts are up already ($(ip netns list | grep -o '^nshost[0-9]*' | tr '\n' ' ')): bench/nshosts.sh down first" >&2
	exit 1
fi
mkdir -p $d
if [ "$sshd" != 0 ]; then
	mkdir -p /run/sshd
	[ -f $d/id ] || ssh-keygen -q -t ed25519 -N '' -f $d/id
	cp $d/id.pub $d/authorized_keys
	: > $d/known_hosts
fi
hosts=""
for i in $(seq 0 $((n - 1))); do
	local_ip=10.232.0.$((4 * i + 1)); remote_ip=10.232.0.$((4 * i + 2))
	ip netns add nshost$i
	ip link add nsh${i}a type veth peer name nsh${i}b
	ip link set nsh${i}b netns nshost$i
	ip addr add $local_ip/30 dev nsh${i}a; ip link set nsh${i}a up
	ip -n nshost$i addr add $remote_ip/30 dev nsh${i}b
	ip -n nshost$i link set nsh${i}b up; ip -n nshost$i link set lo up
	ip -n nshost$i route add default via $local_ip
	[ "${TW_REUSE:-}" = 1 ] && ip netns exec nshost$i sysctl -q -w net.ipv4.tcp_tw_reuse=1
	if [ "$sshd" = 0 ]; then
		echo "nshost$i $remote_ip"
		continue
	fi
	mkdir -p $d/h$i
	ssh-keygen -q -t ed25519 -N '' -f $d/h$i/hostkey
	printf 'Port 2222\nListenAddress %s\nHostKey %s\nAuthorizedKeysFile %s\nPidFile %s\nUsePAM no\nStrictModes no\nPasswordAuthentication no\nPermitRootLogin yes\nSubsystem sftp internal-sftp\n' \
		$remote_ip $d/h$i/hostkey $d/authorized_keys $d/h$i/sshd.pid > $d/h$i/sshd_config
	pin=""; [ -n "${CPUS:-}" ] && pin="taskset -c $CPUS"
	ip netns exec nshost$i $pin /usr/sbin/sshd -f $d/h$i/sshd_config
	echo "[$remote_ip]:2222 $(cat $d/h$i/hostkey.pub)" >> $d/known_hosts
	hosts="$hosts${hosts:+,}root@$remote_ip:2222"
done
[ "$sshd" = 0 ] && exit 0
echo "-server-host 10.232.0.1 -load-hosts $hosts -ssh-option IdentityFile=$d/id -ssh-option UserKnownHostsFile=$d/known_hosts"
