"""The engine's per-step numbers against real torch FSDP runs on CPU/gloo: exact, tolerance 0.

Every case trains the fsdpsim reference model (fp32, manual attention, AdamW) for two full
steps on W = 2 or 4 spawned gloo ranks (:mod:`fsdpsim.measured.harness.fsdp_runs`) and counts, per
rank per step, every ``c10d`` collective with a ``TorchDispatchMode``. The counts must equal
:func:`fsdpsim.engine.evaluate` with fp32 gathers and reduces (``compute_bytes = reduce_bytes =
4``), on every rank and every step:

* all-gather bytes (gathered output) = ``all_gather_bytes``;
* reduce-scatter bytes (padded input) = ``reduce_scatter_bytes``; the output is that / S;
* all-reduce bytes (buffer) = ``all_reduce_bytes``;
* call counts: the engine does not output them, so they are computed here the way the engine
  weights its collectives, from :func:`fsdpsim.costs.comm.fsdp_calls_per_microbatch` for the L
  block units (the plan's ``reshard_after_forward``) and the root unit (``reshard=False``),
  times the micro-batches, plus :func:`fsdpsim.costs.comm.fsdp_calls_per_step` per unit.

The model, ``SPEC``, is chosen so that padding happens everywhere: d = 66 rows pad to 68 at
W = 4 (FSDP2 pads every parameter's dim 0 to a multiple of the shard group), the vocabulary
501 pads to 502 (W = 2) and 504 (W = 4), and the root's flat parameter, 68,310 elements, pads
to 68,312 for FSDP1 at W = 4.

Explicit ``reshard_after_forward=True`` on the root (FSDP2) gathers the root again in backward:
2U all-gathers instead of the 2U − 1 the engine models (its ``reshard`` flag is FSDP2's default
``None``: True for the blocks, False for the root). The engine has no input for it, so that case
asserts the difference: exactly one more all-gather of the padded root.

FLOPs: ``FlopCounterMode`` on one forward and backward of the reference model (manual
attention, one process) equals ``model_flops_per_step`` (PaLM convention: the full s × s
attention square, causal mask not discounted, backward = 2 × forward; embedding lookups, norms,
softmax and loss count 0). With ``torch.utils.checkpoint`` around every block the count adds
one more forward of the blocks (their weight matmuls and attention products; the LM head is
not recomputed) and equals ``hardware_flops_per_step`` with ``recompute="full"`` and
``flash=False`` (eager attention counts the full square).

Sharded state (FSDP2 full shard, after each step, before ``zero_grad``): the engine's
``params_bytes``, ``grads_bytes`` and ``optimizer_bytes`` (AdamW ``exp_avg`` + ``exp_avg_sq``)
are ``4 · padded / W`` and ``8 · padded / W``. Rank 0 holds full ``ceil(d0 / W)``-row chunks
of every parameter and equals them exactly; the last rank holds fewer rows (FSDP2 does not
store the padding in the DTensor's local shard, only in the storage behind it), the storage
behind every rank's parameter shards equals the padded figure, and the ranks' local shards
sum to the unpadded model. AdamW's ``step`` counters (one 4-byte scalar per parameter tensor)
are excluded from the engine's optimizer bytes and checked separately.

``pytest -s`` prints the measured-vs-predicted tables.
"""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass

import numpy as np
import pytest

from fsdpsim import engine

from fsdpsim.drivers import predict
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.costs.comm import STRATEGY_CODES, fsdp_calls_per_microbatch, fsdp_calls_per_step
from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.hardware.system import resolve_system

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from fsdpsim.measured.harness.fsdp_runs import (  # noqa: E402
    RunCase,
    RunError,
    count_flops,
    launch,
    launcher_probe,
    run_cases,
)

SEQ_LEN = 32
MICRO_BATCH = 2
STEPS = 2
ELEMENT_BYTES = 4  # fp32 parameters, gathers and reduces
LAUNCH_TIMEOUT_S = 240.0  # a hung collective fails the test instead of blocking CI

SPEC = ModelSpec(
    name="padding-gpt", n_layers=2, d_model=66, n_heads=6, ffn_size=4 * 66, ffn_kind="gelu",
    vocab_size=501, tied_embeddings=False, position="learned", max_seq_len=SEQ_LEN,
    norm="layernorm", norm_bias=False, qkv_bias=False, attn_out_bias=False, mlp_bias=False,
)
# block = 4·66² (q, k, v, o) + 2·264·66 (up, down) + 2·66 (norms) = 52,404
# root  = 2·501·66 (tok, head) + 32·66 (pos) + 66 (final norm)   = 68,310
N_PARAMS = 2 * 52_404 + 68_310  # 173,118 → 692,472 B in fp32

SYSTEM = resolve_system(load_catalog(), gpu="h100-sxm5-80gb")  # irrelevant to bytes and FLOPs


# ============================================================================ the engine side
def evaluate(spec: ModelSpec, plan: ParallelPlan, *, per_parameter: bool = True,
             grad_accum: int = 1, micro_batch: int = MICRO_BATCH, seq_len: int = SEQ_LEN,
             recompute: str = "none") -> dict[str, float]:
    training = TrainingConfig(seq_len=seq_len, precision="fp32", reduce_dtype="fp32",
                              flash_attention=False)
    x = {}
    x.update(predict.model_inputs(spec, plan.dp_shard, per_parameter=per_parameter))
    x.update(predict.system_inputs(SYSTEM, training.precision))
    x.update(predict.plan_inputs(plan))
    x.update(predict.training_inputs(training))
    x.update(micro_batch=micro_batch, grad_accum=grad_accum,
             recompute=engine.RECOMPUTE_CODES[recompute],
             compute_bytes=float(ELEMENT_BYTES), reduce_bytes=float(ELEMENT_BYTES),
             ceilings=0.0)
    out = engine.evaluate(x)
    values = {k: float(np.asarray(v)) for k, v in out.items()}
    values["root_numel_padded"] = float(np.asarray(x["root_numel_padded"]))
    return values


def engine_calls(plan: ParallelPlan, n_layers: int, grad_accum: int) -> dict[str, int]:
    """Collective calls per rank per step as the engine weights them (it does not output them):
    L blocks with the plan's reshard flag, the root unit with reshard False, per micro-batch;
    plus the once-per-step calls of every unit."""
    code = STRATEGY_CODES[plan.sharding]
    block = fsdp_calls_per_microbatch(code, plan.reshard_after_forward and not plan.keep_gathered)
    root = fsdp_calls_per_microbatch(code, False)
    per_step = fsdp_calls_per_step(code)
    # kept gathered: one gathering micro-batch per step; gradient sync on the last: one reducing
    repeats = (1 if plan.keep_gathered else grad_accum,
               1 if plan.grad_sync == "last" else grad_accum,
               1 if plan.grad_sync == "last" else grad_accum)
    calls = [m * (n_layers * b + r) + (n_layers + 1) * s
             for m, b, r, s in zip(repeats, block, root, per_step)]
    return dict(zip(("all_gather", "reduce_scatter", "all_reduce"), (int(c) for c in calls)))


# ============================================================================ the cases
@dataclass(frozen=True)
class ExactCase:
    run: RunCase
    world: int
    plan: ParallelPlan
    per_parameter: bool
    """FSDP2 pads every parameter (True); FSDP1 pads each unit's flat parameter (False)."""
    extra_root_gathers: int = 0
    """All-gathers of the root unit that torch does and the engine cannot express."""

    @property
    def name(self) -> str:
        return self.run.name


def _fsdp2(name, world, plan, **kw):
    return ExactCase(RunCase(name, SPEC, "fsdp2", steps=STEPS, micro_batch=MICRO_BATCH,
                             seq_len=SEQ_LEN, **kw), world, plan, per_parameter=True)


def _fsdp1(name, world, plan, strategy, **kw):
    return ExactCase(RunCase(name, SPEC, "fsdp1", fsdp1_strategy=strategy, steps=STEPS,
                             micro_batch=MICRO_BATCH, seq_len=SEQ_LEN, **kw),
                     world, plan, per_parameter=False)


def _explicit_true(name, world):
    case = _fsdp2(name, world, ParallelPlan(world, 8, "full"), reshard_after_forward=True)
    return ExactCase(case.run, world, case.plan, True, extra_root_gathers=1)


HYBRID_2X2 = ParallelPlan(4, 8, "hybrid", shard_group_size=2)
CASES = [
    # -- W = 2
    _fsdp2("fsdp2-default-w2", 2, ParallelPlan(2, 8, "full"), state_bytes=True),
    _explicit_true("fsdp2-reshard-true-w2", 2),
    _fsdp2("fsdp2-reshard-false-w2", 2, ParallelPlan(2, 8, "full", reshard_after_forward=False),
           reshard_after_forward=False),
    _fsdp2("fsdp2-default-accum2-w2", 2, ParallelPlan(2, 8, "full"), grad_accum=2),
    _fsdp1("fsdp1-full-shard-w2", 2, ParallelPlan(2, 8, "full"), "FULL_SHARD"),
    _fsdp1("fsdp1-full-shard-accum2-w2", 2, ParallelPlan(2, 8, "full"), "FULL_SHARD",
           grad_accum=2),
    # Told not to re-gather or not to sync every micro-batch (the "unless told not to").
    _fsdp2("fsdp2-sync-last-accum2-w2", 2, ParallelPlan(2, 8, "full", grad_sync="last"),
           grad_accum=2, grad_sync_last=True),
    _fsdp2("fsdp2-keep-gathered-accum2-w2", 2,
           ParallelPlan(2, 8, "full", reshard_after_forward=False, keep_gathered=True),
           grad_accum=2, reshard_after_forward=False, keep_gathered=True),
    _fsdp1("fsdp1-full-shard-accum2-nosync-w2", 2, ParallelPlan(2, 8, "full", grad_sync="last"),
           "FULL_SHARD", grad_accum=2, no_sync=True),
    # DDP-like: the engine all-reduces once per step, i.e. no_sync on the other micro-batches.
    _fsdp1("fsdp1-no-shard-accum2-nosync-w2", 2, ParallelPlan(2, 8, "none"), "NO_SHARD",
           grad_accum=2, no_sync=True),
    # -- W = 4
    _fsdp2("fsdp2-default-w4", 4, ParallelPlan(4, 8, "full"), state_bytes=True),
    _explicit_true("fsdp2-reshard-true-w4", 4),
    _fsdp2("fsdp2-reshard-false-w4", 4, ParallelPlan(4, 8, "full", reshard_after_forward=False),
           reshard_after_forward=False),
    _fsdp2("fsdp2-hsdp-2x2", 4, HYBRID_2X2, mesh_shape=(2, 2)),
    _fsdp1("fsdp1-full-shard-w4", 4, ParallelPlan(4, 8, "full"), "FULL_SHARD"),
    _fsdp1("fsdp1-shard-grad-op-w4", 4, ParallelPlan(4, 8, "grad_op"), "SHARD_GRAD_OP"),
    _fsdp1("fsdp1-no-shard-w4", 4, ParallelPlan(4, 8, "none"), "NO_SHARD"),
    _fsdp1("fsdp1-hybrid-shard-2x2", 4, HYBRID_2X2, "HYBRID_SHARD", mesh_shape=(2, 2)),
]
BY_NAME = {c.name: c for c in CASES}


def expected_comm(case: ExactCase) -> dict[str, int]:
    """What the engine predicts for ``case`` (plus the documented extra root gathers)."""
    pred = evaluate(SPEC, case.plan, per_parameter=case.per_parameter,
                    grad_accum=case.run.grad_accum)
    calls = engine_calls(case.plan, SPEC.n_layers, case.run.grad_accum)
    root_bytes = pred["root_numel_padded"] * ELEMENT_BYTES
    return {
        "ag_calls": calls["all_gather"] + case.extra_root_gathers,
        "ag_bytes": int(pred["all_gather_bytes"] + case.extra_root_gathers * root_bytes),
        "rs_calls": calls["reduce_scatter"],
        "rs_in_bytes": int(pred["reduce_scatter_bytes"]),
        "rs_out_bytes": int(pred["reduce_scatter_bytes"]) // case.plan.dp_shard,
        "ar_calls": calls["all_reduce"],
        "ar_bytes": int(pred["all_reduce_bytes"]),
        "other_calls": 0,
    }


def measured_comm(step: dict) -> dict[str, int]:
    c = step["comm"]
    return {
        "ag_calls": c["all_gather"]["calls"], "ag_bytes": c["all_gather"]["out_bytes"],
        "rs_calls": c["reduce_scatter"]["calls"], "rs_in_bytes": c["reduce_scatter"]["in_bytes"],
        "rs_out_bytes": c["reduce_scatter"]["out_bytes"],
        "ar_calls": c["all_reduce"]["calls"], "ar_bytes": c["all_reduce"]["out_bytes"],
        "other_calls": c["other"]["calls"],
    }


# ============================================================================ the runs
COMM_COLUMNS = ("ag_calls", "ag_bytes", "rs_calls", "rs_in_bytes", "rs_out_bytes", "ar_calls",
                "ar_bytes")


def _table(title: str, header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(v).rjust(w) if i else str(v).ljust(w)  # noqa: E731
                               for i, (v, w) in enumerate(zip(r, widths)))
    return "\n".join([title, line(header), line(["-" * w for w in widths]),
                      *(line(r) for r in rows)])


def _comm_table(results: dict[str, list]) -> str:
    rows = []
    for case in CASES:
        meas = measured_comm(results[case.name][0]["steps"][0])
        exp = expected_comm(case)
        for label, values in (("measured", meas), ("engine", exp)):
            rows.append([case.name if label == "measured" else "", label,
                         *(f"{values[k]:,}" for k in COMM_COLUMNS)])
        if case.extra_root_gathers:
            rows[-1][1] = "engine+root"
    header = ["case (rank 0, step 0)", "", "AG calls", "AG out B", "RS calls", "RS in B",
              "RS out B", "AR calls", "AR B"]
    return _table(f"Collectives per rank per step, {SPEC.name} (V{SPEC.vocab_size} "
                  f"d{SPEC.d_model} L{SPEC.n_layers} s{SEQ_LEN} b{MICRO_BATCH}, fp32):",
                  header, rows)


def _state_table(results: dict[str, list]) -> str:
    rows = []
    for case in (c for c in CASES if c.run.state_bytes):
        pred = evaluate(SPEC, case.plan, per_parameter=True)
        states = [r["steps"][-1]["state"] for r in results[case.name]]
        for key in ("params_bytes", "grads_bytes", "optimizer_bytes"):
            rows.append([case.name, key, f"{pred[key]:,.0f}", *(f"{s[key]:,}" for s in states)])
        rows.append([case.name, "AdamW step counters", "excluded",
                     *(f"{s['step_bytes']:,}" for s in states)])
    width = max(c.world for c in CASES)
    header = ["case", "quantity", "engine", *(f"rank {r}" for r in range(width))]
    rows = [r + [""] * (len(header) - len(r)) for r in rows]
    return _table("Sharded state bytes per rank after the step (FSDP2 full shard; local "
                  "shards without padding):", header, rows)


@pytest.fixture(scope="module")
def runs() -> dict[str, list]:
    """Every case's per-rank results: one spawned run per world size, all its cases inside."""
    results: dict[str, list] = {}
    for world in sorted({c.world for c in CASES}):
        cases = [c.run for c in CASES if c.world == world]
        start = time.perf_counter()
        per_rank = launch(run_cases, world, (cases,), timeout_s=LAUNCH_TIMEOUT_S)
        print(f"\nW={world}: {len(cases)} cases × {STEPS} steps in "
              f"{time.perf_counter() - start:.1f} s")
        for case in cases:
            results[case.name] = [rank_out[case.name] for rank_out in per_rank]
    print(_comm_table(results))
    print(_state_table(results))
    return results


# ============================================================================ the launcher
@pytest.mark.slow
def test_launcher_reports_a_failing_rank_and_kills_the_hung_one():
    with pytest.raises(RunError, match=r"(?s)rank 0 of 2 failed.*ValueError: probe failure"):
        launch(launcher_probe, 2, ("fail",), timeout_s=LAUNCH_TIMEOUT_S)
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("fsdpsim")]


@pytest.mark.slow
def test_launcher_times_out_instead_of_blocking():
    start = time.perf_counter()
    with pytest.raises(RunError, match="timed out after 4 s"):
        launch(launcher_probe, 2, ("hang",), timeout_s=4.0)
    assert time.perf_counter() - start < 4.0 + 15.0  # the kill does not wait for the ranks
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("fsdpsim")]


# ============================================================================ comm tests
@pytest.mark.slow
@pytest.mark.parametrize("name", list(BY_NAME))
def test_collectives_equal_engine(runs, name):
    case = BY_NAME[name]
    expected = expected_comm(case)
    per_rank = runs[name]
    assert len(per_rank) == case.world
    for rank, result in enumerate(per_rank):
        assert len(result["steps"]) == STEPS
        for step_i, step in enumerate(result["steps"]):
            measured = measured_comm(step)
            assert measured == expected, (name, rank, step_i, step["comm"]["ops"])
            # The local all-gather input is one shard of the output.
            ag = step["comm"]["all_gather"]
            assert ag["in_bytes"] * case.plan.dp_shard == ag["out_bytes"]


@pytest.mark.slow
def test_explicit_true_on_root_gathers_root_twice(runs):
    """FSDP2 ``reshard_after_forward=True`` on the root too: 2U gathers where the default (and
    the engine) does 2U − 1; the difference is exactly one gather of the padded root unit."""
    for world in (2, 4):
        default = measured_comm(runs[f"fsdp2-default-w{world}"][0]["steps"][0])
        explicit = measured_comm(runs[f"fsdp2-reshard-true-w{world}"][0]["steps"][0])
        root = evaluate(SPEC, ParallelPlan(world, 8, "full"))["root_numel_padded"]
        assert explicit["ag_calls"] - default["ag_calls"] == 1
        assert explicit["ag_bytes"] - default["ag_bytes"] == root * ELEMENT_BYTES
        units = SPEC.n_layers + 1
        assert (default["ag_calls"], explicit["ag_calls"]) == (2 * units - 1, 2 * units)


def test_padding_is_exercised():
    """The padding that makes these checks sharp: FSDP2 at W = 4 pads d = 66 rows to 68 and
    V = 501 to 504; FSDP1 at W = 4 pads the root's flat 68,310 elements to 68,312."""
    assert SPEC.n_params == N_PARAMS
    x4 = predict.model_inputs(SPEC, 4, per_parameter=True)
    assert x4["n_params_padded"] > N_PARAMS
    x4_flat = predict.model_inputs(SPEC, 4, per_parameter=False)
    assert float(x4_flat["root_numel_padded"]) == 68_312


# ============================================================================ state bytes
STATE_CASES = [c.name for c in CASES if c.run.state_bytes]


@pytest.mark.slow
@pytest.mark.parametrize("name", STATE_CASES)
def test_sharded_state_bytes_equal_engine(runs, name):
    case = BY_NAME[name]
    pred = evaluate(SPEC, case.plan, per_parameter=True)
    for step_i in range(STEPS):
        states = [r["steps"][step_i]["state"] for r in runs[name]]
        # Rank 0 holds full ceil(d0 / W)-row chunks of every parameter: the engine's figure.
        for key in ("params_bytes", "grads_bytes", "optimizer_bytes"):
            assert states[0][key] == pred[key], (key, step_i)
            assert max(s[key] for s in states) == pred[key], (key, step_i)
        # The storage behind each rank's parameter shards is padded alike on every rank.
        assert [s["params_storage_bytes"] for s in states] == [pred["params_bytes"]] * case.world
        # The local shards, without padding, add up to the model exactly once.
        assert sum(s["params_bytes"] for s in states) == ELEMENT_BYTES * N_PARAMS
        assert sum(s["grads_bytes"] for s in states) == ELEMENT_BYTES * N_PARAMS
        assert sum(s["optimizer_bytes"] for s in states) == 2 * ELEMENT_BYTES * N_PARAMS
        # AdamW step counters: one fp32 scalar per parameter tensor, not in optimizer_bytes.
        assert all(s["step_bytes"] == 4 * s["n_param_tensors"] for s in states)


# ============================================================================ FLOPs
FLOP_SPECS = {
    "padding-gpt (gelu, MHA, learned)": SPEC,
    "swiglu-gqa-rotary": ModelSpec(
        name="swiglu-gqa-rotary", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2,
        ffn_size=172, ffn_kind="swiglu", vocab_size=500, tied_embeddings=False,
        position="rotary", max_seq_len=SEQ_LEN, norm="rmsnorm", norm_bias=False,
        qkv_bias=False, attn_out_bias=False, mlp_bias=False),
}
FLOP_BATCH = 2


def extra_forward_of_blocks(spec: ModelSpec, batch: int, seq_len: int) -> int:
    """One more forward of every block: 2·T·(block matmul weights) + 4·b·s²·q_dim per layer."""
    tokens = batch * seq_len
    block_matmul_weights = (spec.matmul_params - spec.vocab_size * spec.d_model) // spec.n_layers
    return spec.n_layers * (2 * tokens * block_matmul_weights
                            + 4 * batch * seq_len**2 * spec.q_dim)


def down_projection_forward(spec: ModelSpec, batch: int, seq_len: int) -> int:
    """Forward FLOPs of every block's MLP down projection: L·2·T·f·d."""
    return spec.n_layers * 2 * batch * seq_len * spec.active_ffn_size * spec.d_model


@pytest.fixture(scope="module")
def flop_counts() -> dict[str, dict[str, int]]:
    counts = {}
    for name, spec in FLOP_SPECS.items():
        kw = dict(batch=FLOP_BATCH, seq_len=SEQ_LEN)
        counts[name] = {"plain": count_flops(spec, **kw),
                        "full": count_flops(spec, checkpoint=True, early_stop=False, **kw),
                        "early_stop": count_flops(spec, checkpoint=True, **kw)}
    rows = []
    for name, spec in FLOP_SPECS.items():
        plain = evaluate(spec, ParallelPlan(1, 8, "full"), micro_batch=FLOP_BATCH)
        full = evaluate(spec, ParallelPlan(1, 8, "full"), micro_batch=FLOP_BATCH,
                        recompute="full")
        c = counts[name]
        rows.append([name, "fwd+bwd", f"{c['plain']:,}",
                     f"{plain['model_flops_per_step']:,.0f}", "model_flops_per_step"])
        rows.append(["", "checkpoint, torch default (early stop)", f"{c['early_stop']:,}",
                     f"{full['hardware_flops_per_step']:,.0f}",
                     "hardware_flops_per_step (recompute=full, flash=False)"])
        rows.append(["", "checkpoint, early_stop=False", f"{c['full']:,}",
                     f"{full['hardware_flops_per_step'] + down_projection_forward(spec, FLOP_BATCH, SEQ_LEN):,.0f}",
                     "same + the down projection torch's default skips"])
    print("\n" + _table(f"FlopCounterMode vs engine (b{FLOP_BATCH} s{SEQ_LEN}, manual "
                        "attention, one process, non-reentrant checkpoint per block):",
                        ["model", "run", "FlopCounterMode", "engine", "engine output"], rows))
    return counts


@pytest.mark.parametrize("name", list(FLOP_SPECS))
def test_flop_counter_equals_model_flops(flop_counts, name):
    spec = FLOP_SPECS[name]
    pred = evaluate(spec, ParallelPlan(1, 8, "full"), micro_batch=FLOP_BATCH)
    tokens = FLOP_BATCH * SEQ_LEN
    closed_form = (6 * spec.matmul_params * tokens
                   + 12 * spec.n_layers * FLOP_BATCH * SEQ_LEN**2 * spec.q_dim)
    assert flop_counts[name]["plain"] == closed_form == pred["model_flops_per_step"]
    # Eager attention and no recompute: what the engine says is executed is what torch counts.
    assert pred["hardware_flops_per_step"] == pred["model_flops_per_step"]


@pytest.mark.parametrize("name", list(FLOP_SPECS))
def test_full_block_recompute_equals_engine_full_recompute(flop_counts, name):
    """``set_checkpoint_early_stop(False)``: backward recomputes each block's whole forward,
    which is the engine's full recompute plus the down projection it (like torch's default)
    leaves out."""
    spec = FLOP_SPECS[name]
    pred = evaluate(spec, ParallelPlan(1, 8, "full"), micro_batch=FLOP_BATCH, recompute="full")
    expected = pred["model_flops_per_step"] + extra_forward_of_blocks(spec, FLOP_BATCH, SEQ_LEN)
    assert flop_counts[name]["full"] == expected == (
        pred["hardware_flops_per_step"] + down_projection_forward(spec, FLOP_BATCH, SEQ_LEN))


@pytest.mark.parametrize("name", list(FLOP_SPECS))
def test_default_checkpoint_skips_the_down_projection(flop_counts, name):
    """torch's default non-reentrant checkpoint (early stop; also ``checkpoint_wrapper``)
    stops recomputing once every tensor saved for backward is back: the down projection's
    output is not saved, so its forward is not recomputed."""
    spec = FLOP_SPECS[name]
    model = evaluate(spec, ParallelPlan(1, 8, "full"), micro_batch=FLOP_BATCH)
    expected = (model["model_flops_per_step"]
                + extra_forward_of_blocks(spec, FLOP_BATCH, SEQ_LEN)
                - down_projection_forward(spec, FLOP_BATCH, SEQ_LEN))
    assert flop_counts[name]["early_stop"] == expected


@pytest.mark.parametrize("name", list(FLOP_SPECS))
def test_default_checkpoint_equals_engine_full_recompute(flop_counts, name):
    spec = FLOP_SPECS[name]
    pred = evaluate(spec, ParallelPlan(1, 8, "full"), micro_batch=FLOP_BATCH, recompute="full")
    assert flop_counts[name]["early_stop"] == pred["hardware_flops_per_step"]
