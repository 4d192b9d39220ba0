"""Failures at scale: checkpoints, restarts and the useful fraction of a training job's time.

Pure, vectorised functions: every argument is a number or a numpy array (or pandas Series)
that broadcasts, and every result is a numpy array. Units are SI (seconds, bytes, bytes/s).

The model is the one of Young [1] and Daly [2] for a synchronous job that checkpoints every
``τ`` seconds of useful work: failures arrive as a Poisson process with mean time between
failures ``M`` (for ``N`` GPUs failing independently, ``M = M_gpu / N`` — a series system);
each failure costs a restart ``R`` and the work since the last checkpoint; each checkpoint
stops training for ``δ``, the time to write the model states. Writes are blocking (no
asynchronous checkpointing), every interruption restarts the whole job (no spare replicas
that keep training, as in [5]), and failures during a restart are counted as [2] counts them.

References
----------
[1] J. W. Young, "A first order approximation to the optimum checkpoint interval",
    Communications of the ACM 17(9):530-531 (1974): ``τ_opt = sqrt(2 δ M)``.
[2] J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart
    dumps", Future Generation Computer Systems 22(3):303-312 (2006): the expected wall time
    of a job with exponentially distributed failures,
    ``T_w = M · e^(R/M) · (e^((τ+δ)/M) − 1) · T_s / τ``, and its optimum
    ``τ_opt = sqrt(2δM) · [1 + (1/3)·sqrt(δ/(2M)) + (1/9)·(δ/(2M))] − δ`` for ``δ < 2M``,
    ``τ_opt = M`` otherwise.
[3] Llama Team, "The Llama 3 Herd of Models", arXiv 2407.21783 (2024), §3.3.4: 419
    unexpected interruptions in 54 days of pre-training on 16,384 H100 GPUs (466 with the
    planned ones); > 90 % effective training time. §3.3.1: the Tectonic storage behind it
    sustains 2 TB/s (7 TB/s peak).
[4] A. Kokolis et al., "Revisiting Reliability in Large-Scale Machine Learning Research
    Clusters", HPCA 2025 (arXiv 2410.21680): job failure rates growing linearly with GPUs on
    two A100 clusters, and the effective training time ratio (ETTR) of this kind of model.
[5] O. Salpekar et al., "Training LLMs with Fault Tolerant HSDP on 100,000 GPUs", arXiv
    2602.00277 (2026): a failure stalls fully synchronous training for about 10 minutes at
    O(100K) GPUs (3 minutes with fault-tolerant HSDP).
"""

from __future__ import annotations

import numpy as np

from fsdpsim.costs.compute import as_array
from fsdpsim.costs.memory import NONE, model_state_bytes

#: Beyond this exponent e^x − 1 is computed as e^x (1 − e^-x) in logs: no overflow, no warning.
_LARGE_EXPONENT = 30.0


def job_mtbf_s(gpu_mtbf_s, num_gpus):
    """Mean time between interruptions of a job on ``num_gpus`` GPUs [s].

    ``M = M_gpu / N``: a synchronous job stops when any of its N GPUs (with its share of hosts,
    NICs, switches and software) fails; independent exponential failures add their rates.
    [4] finds job failure rates linear in the GPU count; [3]'s 419 interruptions on 16,384
    GPUs give ``M_gpu`` = 50,677 GPU-hours (``fsdpsim.drivers.procurement.DEFAULT_GPU_MTBF_S``).

    Parameters
    ----------
    gpu_mtbf_s : mean time between job-stopping failures per GPU, M_gpu [s]
    num_gpus : GPUs in the job, N [-]
    """
    return as_array(gpu_mtbf_s) / as_array(num_gpus)


def checkpoint_bytes(n_params, param_bytes, optimizer_bytes_per_param):
    """Bytes of one checkpoint: the model's parameters and optimizer states, once [B].

    The states of the memory model (:func:`fsdpsim.costs.memory.model_state_bytes`) without
    sharding or gradients: ``Ψ · (p + K)``. Sharded checkpoints (torch DCP, Megatron's
    distributed optimizer) write every shard once, replicas not again, so the job writes this
    many bytes whatever the plan ([3] §3.3.1: 1 MB to 4 GB per GPU for Llama 3 405B).

    Parameters
    ----------
    n_params : Ψ, parameters of the model [-]
    param_bytes : p, bytes per parameter of the stored (master) copy [B]
    optimizer_bytes_per_param : K, optimizer-state bytes per parameter [B]
    """
    states = model_state_bytes(n_params, 1, 1, NONE, param_bytes=param_bytes, grad_bytes=0.0,
                               optimizer_bytes_per_param=optimizer_bytes_per_param, check=False)
    return states["params_bytes"] + states["optimizer_bytes"]


def checkpoint_write_s(checkpoint_bytes_, storage_bytes_per_s):
    """Time training stops to write one checkpoint, δ [s]: bytes / aggregate write bandwidth.

    Bandwidth-bound and blocking (no overlap with training, as asynchronous checkpointing
    would have).

    Parameters
    ----------
    checkpoint_bytes_ : bytes of one checkpoint [B]
    storage_bytes_per_s : write bandwidth the job gets from its storage, all writers [B/s]
    """
    return as_array(checkpoint_bytes_) / as_array(storage_bytes_per_s)


def young_interval_s(checkpoint_s, mtbf_s):
    """Young's optimum interval of useful work between checkpoints [s]: ``sqrt(2 δ M)`` [1].

    Parameters
    ----------
    checkpoint_s : δ, time to write a checkpoint [s]
    mtbf_s : M, mean time between interruptions of the job [s]
    """
    return np.sqrt(2.0 * as_array(checkpoint_s) * as_array(mtbf_s))


def daly_interval_s(checkpoint_s, mtbf_s):
    """Daly's higher-order optimum interval of useful work between checkpoints [s] [2].

    ``τ = sqrt(2δM) · [1 + (1/3)·sqrt(δ/(2M)) + (1/9)·(δ/(2M))] − δ`` when ``δ < 2M``, else
    ``τ = M``. It tends to Young's ``sqrt(2δM)`` [1] when ``δ ≪ M``.

    Parameters
    ----------
    checkpoint_s : δ, time to write a checkpoint [s]
    mtbf_s : M, mean time between interruptions of the job [s]
    """
    delta, m = np.broadcast_arrays(as_array(checkpoint_s), as_array(mtbf_s))
    x = np.minimum(delta / (2.0 * m), 1.0)  # δ/(2M), capped where the other branch applies
    tau = np.sqrt(2.0 * delta * m) * (1.0 + np.sqrt(x) / 3.0 + x / 9.0) - delta
    return np.where(delta < 2.0 * m, tau, m)


def log_wall_time_factor(interval_s, checkpoint_s, restart_s, mtbf_s):
    """``ln(T_w / T_s)``: the log of expected wall time over failure-free time [-] [2].

    ``T_w / T_s = M · e^(R/M) · (e^((τ+δ)/M) − 1) / τ``: every segment of τ useful seconds
    plus its checkpoint δ is retried until it runs without a failure, each failure costing a
    restart R. In logs, so that a job that fails far more often than it can checkpoint gives a
    huge but finite number instead of an overflow.

    Parameters
    ----------
    interval_s : τ, useful work between checkpoints [s]
    checkpoint_s : δ, time to write a checkpoint [s]
    restart_s : R, time from a failure until training runs again (detection, rescheduling,
        start-up, reading the checkpoint) [s]
    mtbf_s : M, mean time between interruptions of the job [s]
    """
    tau, delta, r, m = (as_array(v) for v in (interval_s, checkpoint_s, restart_s, mtbf_s))
    x = (tau + delta) / m
    small = np.minimum(x, _LARGE_EXPONENT)
    log_expm1 = np.where(x > _LARGE_EXPONENT, x + np.log1p(-np.exp(-np.maximum(x, 1.0))),
                         np.log(np.expm1(small)))
    return np.log(m) + r / m + log_expm1 - np.log(tau)


def goodput(interval_s, checkpoint_s, restart_s, mtbf_s):
    """Useful fraction of a job's wall time, ``T_s / T_w`` [-] [2] (ETTR in [4]).

    1 without failures and checkpoints; falls as failures become frequent (more GPUs), as
    checkpoints take longer (less storage bandwidth) and as restarts take longer. Below about
    1e-300 it is 0.

    Parameters
    ----------
    interval_s : τ, useful work between checkpoints [s]
    checkpoint_s : δ, time to write a checkpoint [s]
    restart_s : R, time to restart after a failure [s]
    mtbf_s : M, mean time between interruptions of the job [s]
    """
    return np.exp(-log_wall_time_factor(interval_s, checkpoint_s, restart_s, mtbf_s))


def expected_interruptions(wall_s, mtbf_s):
    """Expected failures during a job's wall time, ``T_w / M`` [-] (a Poisson count's mean)."""
    return as_array(wall_s) / as_array(mtbf_s)


__all__ = ["job_mtbf_s", "checkpoint_bytes", "checkpoint_write_s", "young_interval_s",
           "daly_interval_s", "log_wall_time_factor", "goodput", "expected_interruptions"]
