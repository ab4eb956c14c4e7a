"""Writes FedScale-format trace files of realistic size (FedScale ships about 500 000 device
entries): OUT/client_device_capacity and OUT/client_behave_trace, seeded, for the "Scale"
figures in docs/src/guide/scale.md. Usage: python3 scripts/dev/fedscale_large.py OUT [ENTRIES]"""
import os
import pickle
import random
import sys

out = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 500_000
os.makedirs(out, exist_ok=True)
random.seed(1)
devices = {i * 7 + 3: {'computation': random.uniform(5, 200),
                       'communication': random.uniform(500, 50_000)} for i in range(n)}
with open(os.path.join(out, 'client_device_capacity'), 'wb') as f:
    pickle.dump(devices, f, protocol=4)
behave = {}
for i in range(n):
    t, active, inactive = 0.0, [], []
    for _ in range(random.randint(1, 20)):
        t += random.uniform(100, 5000)
        active.append(t)
        t += random.uniform(100, 5000)
        inactive.append(t)
    behave[i * 7 + 3] = {'active': active, 'inactive': inactive, 'finish_time': t + 100,
                         'model': 'x'}
with open(os.path.join(out, 'client_behave_trace'), 'wb') as f:
    pickle.dump(behave, f, protocol=4)
