"""Money and energy of a training run: pure, vectorised functions of a predicted throughput.

Every function takes numbers or numpy arrays that broadcast, and returns an array. Inputs are
SI (seconds, watts, joules) plus US dollars; prices per GPU-hour are converted at the edges
(``usd_per_gpu_s = usd_per_gpu_hour / 3600``).

Energy here is an **upper bound of accelerator board power**: every GPU is charged its TDP for
the whole run. Real training draws less than TDP on average (Patterson et al. 2021 [1] measure
average, not peak, power), and CPUs, memory, NICs and switches are not counted; a PUE factor
[2] scales the IT energy to the facility's. Cost is rent: GPU-hours times a price per GPU-hour
(the catalog's ``rent_usd_per_hour``, an order-of-magnitude on-demand rate, or a user's price).

References
----------
[1] Patterson et al., "Carbon Emissions and Large Neural Network Training", arXiv:2104.10350
    (2021): energy = training hours × number of processors × average power per processor × PUE.
[2] The Green Grid, "PUE: A Comprehensive Examination of the Metric", White Paper #49 (2012):
    PUE = total facility energy / IT equipment energy (≥ 1).
"""

from __future__ import annotations

from fsdpsim.costs.compute import as_array


def cost_per_token_usd(price_usd_per_gpu_s, num_gpus, tokens_per_s):
    """Rent per trained token [USD/token].

    ``c = price · N / (tokens/s)``: N GPUs rented at ``price`` each for the seconds one token
    takes at the job's throughput.

    Parameters
    ----------
    price_usd_per_gpu_s : rent of one GPU [USD/s]
    num_gpus : GPUs in the job, N [-]
    tokens_per_s : job throughput [token/s]
    """
    return as_array(price_usd_per_gpu_s) * as_array(num_gpus) / as_array(tokens_per_s)


def energy_per_token_j(power_w_per_gpu, num_gpus, tokens_per_s, pue=1.0):
    """Energy per trained token [J/token], an upper bound when ``power_w_per_gpu`` is the TDP.

    ``e = P · N · PUE / (tokens/s)`` (Patterson et al. 2021 [1], per token instead of per run).

    Parameters
    ----------
    power_w_per_gpu : power drawn by one accelerator [W] (TDP: upper bound of board power)
    num_gpus : GPUs in the job, N [-]
    tokens_per_s : job throughput [token/s]
    pue : facility power usage effectiveness [-] (1 = accelerators only) [2]
    """
    return as_array(power_w_per_gpu) * as_array(num_gpus) * as_array(pue) / as_array(tokens_per_s)


def time_to_train_s(tokens, tokens_per_s):
    """Wall time to train ``tokens`` tokens at a steady throughput [s]: ``tokens / (tokens/s)``.

    Ignores start-up, checkpointing, evaluation and failures (a lower bound of wall time).
    """
    return as_array(tokens) / as_array(tokens_per_s)


def training_cost_usd(tokens, price_usd_per_gpu_s, num_gpus, tokens_per_s):
    """Rent of a whole run [USD]: ``tokens · cost_per_token``."""
    return as_array(tokens) * cost_per_token_usd(price_usd_per_gpu_s, num_gpus, tokens_per_s)


def training_energy_j(tokens, power_w_per_gpu, num_gpus, tokens_per_s, pue=1.0):
    """Energy of a whole run [J]: ``tokens · energy_per_token`` (an upper bound with TDP)."""
    return as_array(tokens) * energy_per_token_j(power_w_per_gpu, num_gpus, tokens_per_s, pue)


__all__ = ["cost_per_token_usd", "energy_per_token_j", "time_to_train_s", "training_cost_usd",
           "training_energy_j"]
