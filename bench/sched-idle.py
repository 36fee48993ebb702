#!/usr/bin/env python3
"""Where a host's idle CPU time goes while a server is under load.

Reads `perf sched timehist` output (a `perf sched record` taken during a run) on stdin and
prints, for the window recorded: each CPU's idle time; how much of that idle passed while
some task was runnable but queued on another CPU (the kernel left it behind a running task
instead of moving it to the idle CPU), by task name; and what the other CPUs ran meanwhile.

Written to find why one multi-threaded worker left 15-18 % of a 2-core host idle where the
prefork cluster left < 1 % (docs/results/single-2026-12-05-2cpu/). Usage:

    perf sched record -o sched.data -- sleep 1      # during the load
    perf sched timehist -i sched.data | python3 bench/sched-idle.py
"""
import collections
import sys

# A gap shorter than this between two runs on a CPU is the switch itself, not idle.
MIN_GAP_MS = 0.002


def main():
    runs = collections.defaultdict(list)  # cpu -> [(start, end, task)]
    queued = []  # (start, end, cpu, task): runnable, not running
    ran = collections.Counter()
    for line in sys.stdin:
        f = line.split()
        try:
            end = float(f[0]) * 1000
            cpu = int(f[1].strip("[]"))
            _, sched_delay, run = map(float, f[3:6])
        except (ValueError, IndexError):
            continue  # headers, and lines of other formats
        task = f[2].split("[")[0]
        if task == "<idle>":
            continue
        runs[cpu].append((end - run, end, task))
        ran[task] += run
        if sched_delay > 0:
            queued.append((end - run - sched_delay, end - run, cpu, task))
    if not runs:
        sys.exit("sched-idle: no `perf sched timehist` lines on stdin")
    for v in runs.values():
        v.sort()
    queued.sort()
    start = min(v[0][0] for v in runs.values())
    stop = max(v[-1][1] for v in runs.values())
    span = stop - start
    idle_total = 0.0
    while_queued = collections.Counter()
    others_ran = collections.Counter()
    for cpu, v in sorted(runs.items()):
        idle = 0.0
        for (_, a, _), (b, _, _) in zip(v, v[1:]):
            if b - a <= MIN_GAP_MS:
                continue
            idle += b - a
            for qs, qe, qcpu, task in queued:
                if qs >= b:
                    break
                if qe > a and qcpu != cpu:
                    while_queued[task] += min(b, qe) - max(a, qs)
            for ocpu, ov in runs.items():
                if ocpu == cpu:
                    continue
                for s, e, task in ov:
                    if s >= b:
                        break
                    if e > a:
                        others_ran[task] += min(b, e) - max(a, s)
        idle_total += idle
        print(f"cpu {cpu}: idle {idle:.0f} ms of {span:.0f}")
    print(f"all: idle {idle_total:.0f} ms of {span * len(runs):.0f} "
          f"({100 * idle_total / (span * len(runs)):.1f} %)")
    print("ran (ms):", fmt(ran))
    print("idle while a task was queued on another CPU (ms):", fmt(while_queued))
    print("other CPUs ran meanwhile (ms):", fmt(others_ran))


def fmt(counter, n=4):
    return ", ".join(f"{k} {v:.0f}" for k, v in counter.most_common(n)) or "none"


if __name__ == "__main__":
    main()
