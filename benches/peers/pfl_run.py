"""The peer benchmark in pfl-research (`pfl`), through its documented simulation API:
FederatedDataset, SimulatedBackend, FederatedAveraging, PyTorchModel.

  python benches/peers/pfl_run.py mlp|cnn DATA.parquet

pfl's own choices kept: users drawn by `minimize_reuse` (its recommended sampler: a user comes
back only after every other one has), local batches in the data's order (its Dataset does not
shuffle), the central model moved by the averaged model difference through a central SGD of
learning rate 1 (plain FedAvg), updates weighted by data points.
"""


import torch
import torch.nn.functional as F

from common import BATCH, EPOCHS, LR, evaluate, model, report, start
from pfl.aggregate.simulate import SimulatedBackend
from pfl.aggregate.weighting import WeightByDatapoints
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
from pfl.data.federated_dataset import FederatedDataset
from pfl.data.sampling import get_user_sampler
from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
from pfl.metrics import Weighted
from pfl.model.pytorch import PyTorchModel


def with_loss_and_metrics(net):
    """pfl's PyTorchModel calls `loss(*data)` and `metrics(*data)` on the module."""

    def loss(x, y, eval=False):
        net.eval() if eval else net.train()
        return F.cross_entropy(net(x), y)

    @torch.no_grad()
    def metrics(x, y, eval=True):
        net.eval()
        logits = net(x)
        hits = (logits.argmax(1) == y).sum().item()
        return {"accuracy": Weighted(hits, len(y))}

    net.loss, net.metrics = loss, metrics
    return net


def main():
    workload, (clients, rounds, per_round), data = start()
    federated = FederatedDataset.from_slices(
        {c: [x, y] for c, (x, y, _, _) in enumerate(data)},
        get_user_sampler("minimize_reuse", list(range(clients))),
    )
    net = with_loss_and_metrics(model(workload))
    pfl_model = PyTorchModel(
        model=net,
        local_optimizer_create=torch.optim.SGD,
        central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0),
    )
    backend = SimulatedBackend(
        training_data=federated, val_data=None, postprocessors=[WeightByDatapoints()]
    )
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(
            central_num_iterations=rounds,
            evaluation_frequency=rounds,
            train_cohort_size=per_round,
            val_cohort_size=None,
        ),
        backend=backend,
        model=pfl_model,
        model_train_params=NNTrainHyperParams(
            local_learning_rate=LR, local_num_epochs=EPOCHS, local_batch_size=BATCH
        ),
        model_eval_params=NNEvalHyperParams(local_batch_size=1000),
        callbacks=[],
    )
    report("pfl", workload, evaluate(net, data))


if __name__ == "__main__":
    main()
