"""Writes tests/data/privacy/dp_accounting_rdp.csv and dp_accounting_pld.csv: the ε that Google's
`dp-accounting` (PyPI) computes with its RDP and its PLD accountant for the subsampled Gaussian
mechanism, over the grid that fedsim's accountants (crates/world/src/privacy/accounting.rs, crates/world/src/privacy/pld.rs)
are tested against, within 1 % relative.

    .venv-bench/bin/pip install dp-accounting==0.6.0   # once
    .venv-bench/bin/python scripts/dev/make_privacy_fixtures.py

Columns: sampling (`poisson`: each client joins with probability q, add-or-remove-one
neighbours; `fixed_size`: q·population clients without replacement, replace-one neighbours,
population 10 000), q, noise_multiplier, steps, delta, epsilon, order (the RDP order that
gave ε). The accountant uses dp-accounting's default orders. The PLD file has the Poisson rows
only (dp-accounting's PLD accountant has no sampling without replacement), without `order`, at
the accountant's default discretisation (1e-4).
"""
import csv
import os

from absl import logging
import dp_accounting
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant as pld
from dp_accounting.rdp import rdp_privacy_accountant as rdp

POPULATION = 10_000
QS = [1e-3, 1e-2, 0.1, 1.0]
SIGMAS = [0.5, 1.0, 2.0, 5.0]
STEPS = [1, 100, 10_000]
DELTAS = [1e-5, 1e-6]

Rel = dp_accounting.NeighboringRelation


def epsilon(sampling, q, sigma, steps, delta):
    gaussian = dp_event.GaussianDpEvent(sigma)
    if sampling == "poisson":
        accountant = rdp.RdpAccountant(neighboring_relation=Rel.ADD_OR_REMOVE_ONE)
        event = dp_event.PoissonSampledDpEvent(q, gaussian)
    else:
        accountant = rdp.RdpAccountant(neighboring_relation=Rel.REPLACE_ONE)
        event = dp_event.SampledWithoutReplacementDpEvent(
            POPULATION, round(q * POPULATION), gaussian)
    accountant.compose(dp_event.SelfComposedDpEvent(event, steps))
    return accountant.get_epsilon_and_optimal_order(delta)


def pld_epsilon(q, sigma, steps, delta):
    accountant = pld.PLDAccountant(neighboring_relation=Rel.ADD_OR_REMOVE_ONE)
    event = dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma))
    accountant.compose(dp_event.SelfComposedDpEvent(event, steps))
    return accountant.get_epsilon(delta)


def main():
    # dp-accounting warns for each fractional order its series leaves out (ε = ∞ there);
    # fedsim's accountant leaves out the same ones.
    logging.set_verbosity(logging.ERROR)
    out = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "privacy",
                       "dp_accounting_rdp.csv")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["sampling", "q", "noise_multiplier", "steps", "delta", "epsilon", "order"])
        for sampling in ["poisson", "fixed_size"]:
            for q in QS:
                for sigma in SIGMAS:
                    for steps in STEPS:
                        for delta in DELTAS:
                            eps, order = epsilon(sampling, q, sigma, steps, delta)
                            w.writerow([sampling, repr(q), repr(sigma), steps, repr(delta),
                                        repr(float(eps)), repr(float(order))])
    print(f"wrote {os.path.normpath(out)}")
    out = os.path.join(os.path.dirname(out), "dp_accounting_pld.csv")
    with open(out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["q", "noise_multiplier", "steps", "delta", "epsilon"])
        for q in QS:
            for sigma in SIGMAS:
                for steps in STEPS:
                    for delta in DELTAS:
                        eps = pld_epsilon(q, sigma, steps, delta)
                        w.writerow([repr(q), repr(sigma), steps, repr(delta), repr(float(eps))])
    print(f"wrote {os.path.normpath(out)}")


if __name__ == "__main__":
    main()
