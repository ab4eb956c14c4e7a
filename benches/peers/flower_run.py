"""The peer benchmark in Flower's simulation engine (`flwr[simulation]`), with its Message API
as the quickstart-pytorch app writes it: a ClientApp that trains, a ServerApp running the
FedAvg strategy, `run_simulation` on Ray.

  python benches/peers/flower_run.py mlp|cnn DATA.parquet

Flower's settings: one virtual SuperNode per client (`partition-id` is the client); each
ClientApp asks for one CPU, so two run at once on two cores, each with one torch thread;
federated evaluation off (`fraction_evaluate=0`), the global model evaluated centrally after
the last round by the strategy's `evaluate_fn`. Each ClientApp process reads the table once
and keeps it (`common.load` caches it: ClientApps are stateless by design, Ray's actors are
long-lived processes).
"""

import os
import sys

import torch

from common import WORKLOADS, evaluate, load, model, report, train_epoch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.simulation import run_simulation

WORKLOAD, PATH = sys.argv[1], os.path.abspath(sys.argv[2])
CLIENTS, ROUNDS, PER_ROUND = WORKLOADS[WORKLOAD]
client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    config = msg.content["config"]
    client = int(context.node_config["partition-id"])
    x, y, _, _ = load(config["data"], WORKLOADS[config["workload"]][0])[client]
    net = model(config["workload"])
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    generator = torch.Generator().manual_seed(int(config["server-round"]) * 100_003 + client)
    n = train_epoch(net, x, y, generator)
    content = RecordDict(
        {"arrays": ArrayRecord(net.state_dict()), "metrics": MetricRecord({"num-examples": n})}
    )
    return Message(content=content, reply_to=msg)


server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    torch.manual_seed(1)
    net = model(WORKLOAD)

    def final_accuracy(server_round, arrays):
        if server_round < ROUNDS:
            return None
        net.load_state_dict(arrays.to_torch_state_dict())
        accuracy = evaluate(net, load(PATH, CLIENTS))
        report("flower", WORKLOAD, accuracy)
        return MetricRecord({"accuracy": accuracy})

    strategy = FedAvg(
        fraction_train=PER_ROUND / CLIENTS,
        fraction_evaluate=0.0,
        min_available_nodes=CLIENTS,
    )
    strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(net.state_dict()),
        num_rounds=ROUNDS,
        train_config=ConfigRecord({"data": PATH, "workload": WORKLOAD}),
        evaluate_fn=final_accuracy,
    )


if __name__ == "__main__":
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=CLIENTS,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
    )
