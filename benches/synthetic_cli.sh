#!/usr/bin/env bash
# The two command-line targets on the FedEM authors' synthetic setting (T = 300, d = 150,
# M = 3, 100 rounds, evaluation every 20; data generation, start-up and result files
# included): `fedsim run scenarios/paper/fedem_synthetic_fedem.yaml` in at most 2 s and
# `fedem_synthetic_fedavg.yaml` in at most 1 s on a quiet 2-core machine. Each runs REPEATS
# times (default 5), one after another; printed: the median wall time, the range, the peak
# resident memory and the target. Not run by CI (timings are not tests).
#   bash benches/synthetic_cli.sh                     # the release build (set up if missing)
#   FEDSIM=/path/to/other/fedsim bash benches/synthetic_cli.sh   # another build, same machine
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${FEDSIM:-target/release/fedsim}
[ -x "$bin" ] || bash scripts/setup.sh
python3 - "$bin" "${REPEATS:-5}" <<'EOF'
import os, statistics, subprocess, sys, tempfile, time

binary, repeats = sys.argv[1], int(sys.argv[2])
print(f"{binary}, {repeats} runs each, {os.cpu_count()} cores")
print(f"{'scenario':<32} {'median':>8} {'range':>15} {'peak':>9} {'target':>7}")
with tempfile.TemporaryDirectory() as out:
    for name, target in [("fedem", 2.0), ("fedavg", 1.0)]:
        scenario = f"scenarios/paper/fedem_synthetic_{name}.yaml"
        times, peak = [], 0
        for _ in range(repeats):
            start = time.perf_counter()
            child = subprocess.Popen([binary, "run", scenario, "-q", "--out", f"{out}/run"],
                                     stdout=subprocess.DEVNULL)
            _, status, usage = os.wait4(child.pid, 0)
            times.append(time.perf_counter() - start)
            if status != 0:
                sys.exit(f"{scenario}: fedsim failed (status {status})")
            peak = max(peak, usage.ru_maxrss / 1e6)  # Linux: kB
        median = statistics.median(times)
        verdict = "met" if median <= target else "MISSED"
        print(f"{os.path.basename(scenario):<32} {median:>7.2f}s "
              f"{min(times):>6.2f}–{max(times):.2f} s {peak:>6.2f} GB {target:>5.1f} s  {verdict}")
EOF
