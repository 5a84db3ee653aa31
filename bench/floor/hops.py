#!/usr/bin/env python3
"""Where a sidecar node's time goes, hop by hop, from a `perf trace` of the sidecar chain
(tracepoints, not ptrace: the processes run at nearly full speed).

    perf trace -o trace.txt -f -e clone3,execve,exit_group,wait4,writev,recvfrom,fdatasync,rename,pwrite64 \\
        target/release/madeira bench --scenarios sidecar-chain
    python3 bench/floor/hops.py trace.txt [N]

For the last N nodes (default 38 of the measured run's 40), from one `/bin/true`'s exit to the
next one's: reaped by the sidecar, its result frame written (the sidecar's end of the link) and
read (the control plane's end), the engine's WAL `fdatasync` (its start and length), the next
assignment written and read, the sidecar's `clone3`, the child's `execve` and exit. Medians and
quartiles in ms; the last line is the node without its commit's `fdatasync`, which on a shared
disk varies most. The link's two ends are told apart by which one writes the result frame (a
`writev` of 120-260 bytes after a reap); the WAL is the file written in 4096-byte pages."""
import collections, re, statistics, sys

N = int(sys.argv[2]) if len(sys.argv) > 2 else 38
calls = []
pending = {}  # tid -> the arguments of a call whose end is printed later ("... [continued]")
for line in open(sys.argv[1]):
    line = line.rstrip()
    u = re.match(r"\s*([\d.]+) \(\s*\): .+?/(\d+) (\w+)\((.*)\)\s+\.\.\.\s*$", line)
    if u:
        pending[int(u[2])] = u[4]
        continue
    m = re.match(r"\s*([\d.]+) \(\s*([\d.]*)\s*(?:ms)?\): (.+?)/(\d+) (?:\s*\.\.\. \[continued\]: )?(\w+)\((.*)\)\s+= (.*)$", line)
    if not m:
        continue
    start, dur, tid = float(m[1]), float(m[2]) if m[2] else 0.0, int(m[4])
    args = pending.pop(tid, "") if "[continued]" in line else m[6]
    calls.append({"start": start, "end": start + dur, "comm": m[3], "tid": tid, "name": m[5], "args": args, "ret": m[7]})
calls.sort(key=lambda c: c["start"])


def fd(c):
    m = re.search(r"fd: (\d+)", c["args"])
    return m and int(m[1])


def size(c):
    m = re.match(r"(\d+)", c["ret"])
    return int(m[1]) if m else 0


def after(i, pred):
    for j in range(i + 1, len(calls)):
        if pred(calls[j]):
            return j
    raise LookupError


pages = [c for c in calls if c["name"] == "pwrite64" and "count: 4096" in c["args"]]
WAL = collections.Counter(fd(c) for c in pages[len(pages) // 2:]).most_common(1)[0][0]
kids = [i for i, c in enumerate(calls) if c["name"] == "execve" and c["comm"] == "true"]
names = ["exit -> reaped (wait4)", "reaped -> result frame written", "written -> control plane read it",
         "read -> WAL fdatasync starts", "WAL fdatasync", "synced -> assignment written",
         "written -> sidecar read it", "read -> clone3 starts", "clone3 -> child's execve",
         "execve -> exit (/bin/true)", "node: exit -> next exit", "node minus its WAL fdatasync"]
hops = {k: [] for k in names}
for a, b in zip(kids[-N - 1:-1], kids[-N:]):
    try:
        kid = calls[a]["tid"]
        ex = after(a, lambda c: c["tid"] == kid and c["name"] == "exit_group")
        reap = after(ex, lambda c: c["name"] == "wait4" and c["ret"].startswith(f"{kid} "))
        sent = after(reap, lambda c: c["name"] == "writev" and 120 < size(c) < 260)
        sfd = fd(calls[sent])
        read = after(sent, lambda c: c["name"] == "recvfrom" and fd(c) != sfd and size(c) > 120)
        cfd = fd(calls[read])
        fs = after(read, lambda c: c["name"] == "fdatasync" and fd(c) == WAL)
        asg = after(fs, lambda c: c["name"] == "writev" and fd(c) == cfd and size(c) > 200)
        sr = after(asg, lambda c: c["name"] == "recvfrom" and fd(c) == sfd and size(c) > 200)
        cl = max((j for j in range(sr, b) if calls[j]["name"] == "clone3"), default=None)
        kid2 = calls[b]["tid"]
        ex2 = after(b, lambda c: c["tid"] == kid2 and c["name"] == "exit_group")
    except LookupError:
        continue
    if cl is None:
        continue
    C = calls
    sync = C[fs]["end"] - C[fs]["start"]
    vals = [C[reap]["end"] - C[ex]["start"], C[sent]["start"] - C[reap]["end"], C[read]["end"] - C[sent]["start"],
            C[fs]["start"] - C[read]["end"], sync, C[asg]["start"] - C[fs]["end"],
            C[sr]["end"] - C[asg]["start"], C[cl]["start"] - C[sr]["end"], C[b]["start"] - C[cl]["start"],
            C[ex2]["start"] - C[b]["start"], C[ex2]["start"] - C[ex]["start"], C[ex2]["start"] - C[ex]["start"] - sync]
    for k, v in zip(names, vals):
        hops[k].append(v)
print(f"{len(hops[names[-1]])} nodes; ms: median (p25-p75)")
for k, v in hops.items():
    if len(v) >= 2:
        q = statistics.quantiles(v, n=4)
        print(f"  {k:34s} {statistics.median(v):6.3f}  ({q[0]:.3f}-{q[2]:.3f})")
