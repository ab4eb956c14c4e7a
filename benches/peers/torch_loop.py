"""The peer benchmark's baseline: FedAvg as a minimal sequential PyTorch loop, no framework.

  python benches/peers/torch_loop.py mlp|cnn DATA.parquet
"""

import random

import torch

from common import SEED, evaluate, model, report, start, train_epoch


def main():
    workload, (clients, rounds, per_round), data = start()
    net = model(workload)
    local = model(workload)
    pick = random.Random(SEED)
    generator = torch.Generator().manual_seed(SEED)
    for _ in range(rounds):
        total = None
        weight = 0
        for c in sorted(pick.sample(range(clients), per_round)):
            local.load_state_dict(net.state_dict())
            n = train_epoch(local, data[c][0], data[c][1], generator)
            state = local.state_dict()
            if total is None:
                total = {k: v.detach().clone() * n for k, v in state.items()}
            else:
                for k, v in state.items():
                    total[k] += v * n
            weight += n
        net.load_state_dict({k: v / weight for k, v in total.items()})
    report("pytorch", workload, evaluate(net, data))


if __name__ == "__main__":
    main()
