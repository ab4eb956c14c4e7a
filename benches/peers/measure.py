"""Runs a command and measures it as the peer benchmark reports it: wall time from start to
exit, and peak memory summed over every process it starts (its descendants, and any process
of its session that was handed to init, as Ray's are). Memory is sampled every 50 ms from
/proc: the peak of the summed resident set (RSS, shared pages counted once per process) and of
the summed proportional set (PSS, shared pages split between the processes sharing them).

  python measure.py -- COMMAND...    prints one JSON line: wall_s, peak_rss_mb, peak_pss_mb,
                                     processes (the most seen at once), rc
"""

import json
import os
import subprocess
import sys
import time


def processes():
    """pid -> (ppid, session id) of every process."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[int(name)] = (int(fields[1]), int(fields[3]))
        except OSError:
            pass
    return out


def tree(root):
    """The pids of `root`, its descendants and its session."""
    table = processes()
    children = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo.extend(children.get(pid, []))
    found |= {pid for pid, (_, sid) in table.items() if sid == root}
    return found


def memory_kb(pid):
    """(RSS, PSS) of `pid` in kB, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            values = dict(
                (line.split(":")[0], int(line.split()[1]))
                for line in f
                if line.startswith(("Rss:", "Pss:"))
            )
        return values.get("Rss", 0), values.get("Pss", 0)
    except (OSError, ValueError, IndexError):
        return None


def main():
    command = sys.argv[sys.argv.index("--") + 1 :]
    start = time.monotonic()
    child = subprocess.Popen(command, start_new_session=True)
    peak_rss = peak_pss = most = 0
    while child.poll() is None:
        pids = tree(child.pid)
        sizes = [m for m in map(memory_kb, pids) if m is not None]
        peak_rss = max(peak_rss, sum(r for r, _ in sizes))
        peak_pss = max(peak_pss, sum(p for _, p in sizes))
        most = max(most, len(sizes))
        time.sleep(0.05)
    wall = time.monotonic() - start
    print(
        json.dumps(
            {
                "wall_s": round(wall, 2),
                "peak_rss_mb": round(peak_rss / 1024),
                "peak_pss_mb": round(peak_pss / 1024),
                "processes": most,
                "rc": child.returncode,
            }
        )
    )


if __name__ == "__main__":
    main()
