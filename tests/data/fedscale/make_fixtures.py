"""Writes tiny FedScale trace files in FedScale's own format (pickled dicts keyed by client id),
as FedScale's benchmark/dataset/data/device_info/ ships them. Rerun: python3 make_fixtures.py"""
import pickle

# client_device_capacity: {id: {'computation': ms per sample, 'communication': kbit/s}}
devices = {
    7: {'computation': 100.0, 'communication': 2000.0},
    3: {'computation': 50.0, 'communication': 8000.0},
    12: {'computation': 200.0, 'communication': 500.0},
}
with open('client_device_capacity', 'wb') as f:
    pickle.dump(devices, f, protocol=4)

# client_behave_trace: {id: {'duration', 'inactive', 'finish_time', 'active', 'model'}}
behave = {
    1: {'duration': 300, 'inactive': [100, 250], 'finish_time': 300, 'active': [0, 200], 'model': 'SM-G930F'},
    2: {'duration': 300, 'inactive': [60], 'finish_time': 120, 'active': [30], 'model': 'Pixel'},
}
with open('client_behave_trace', 'wb') as f:
    pickle.dump(behave, f, protocol=2)
