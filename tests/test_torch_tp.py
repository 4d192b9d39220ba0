"""Tensor, sequence and context parallelism against real torch 2.13 runs on CPU/gloo: exact.

Every TP case applies torchtitan-style ``parallelize_module`` plans to the fsdpsim reference
model (fp32, manual attention; :mod:`fsdpsim.measured.harness.tp_runs`) on 2 or 4 spawned gloo ranks
and runs one micro-batch: forward (with the loss), backward and an AdamW step, each counted
with a ``TorchDispatchMode`` that sees DTensor's functional collectives. The counts must equal
:mod:`fsdpsim.costs.tensor_parallel` with torch's layout, call for call and byte for byte:

* per layer :func:`tp_layer_collectives` with ``column_linears`` = the reference model's
  separate q, k, v and up (and gate) projections, ``regather_input=False``;
* the root :func:`tp_head_collectives` (vocab-parallel embedding, LM head, ``loss_parallel``
  cross-entropy; torch's target-logit all-reduce is in the logits' dtype, fp32 here);
* the norm gradients under SP :func:`tp_grad_sync` (``implementation="torch"``): all-reduced
  lazily by AdamW, 3 times per norm tensor, without FSDP; once per micro-batch with FSDP2.

Each model is run with 1 and 2 layers: the difference is one layer, the rest is the root. The
parallelised loss equals the unparallelised model's on the same micro-batch, and every
parameter's per-rank shape equals :func:`tp_local_shapes`.

FSDP2 x TP (2-D mesh ``("dp", "tp")`` = (2, 2)): FSDP2's all-gathers and reduce-scatters on
the dp mesh and the per-rank parameter and AdamW bytes equal ``4 · padded / dp`` and
``8 · padded / dp`` with ``padded = padded_numel(tp_local_shapes(...), dp)``: FSDP2 pads each
TP-local tensor's dim 0 (``_StridedShard`` for column-parallel weights), the same rule as 1-D.

Context parallelism: torch's ``context_parallel`` does not run on CPU (the CPU flash kernel has
no DTensor sharding strategy; :func:`probe_context_parallel`), so the test calls torch's own
ring (``_templated_ring_attention`` and its backward) with the CPU flash kernel: its output
matches unsharded attention and its collectives equal :func:`cp_ring_attention_bytes`.

``pytest -s`` prints the measured tables.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fsdpsim.costs import context_parallel as cpc
from fsdpsim.costs import tensor_parallel as tpc
from fsdpsim.costs.comm import padded_numel
from fsdpsim.model.spec import ModelSpec

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # spawned gloo ranks: 10-30 s each run
torch = pytest.importorskip("torch")

from fsdpsim.measured.harness.fsdp_runs import launch  # noqa: E402
from fsdpsim.measured.harness.tp_runs import (  # noqa: E402
    RingCase,
    TpCase,
    run_all,
)

ELEMENT_BYTES = 4  # fp32 activations, gradients, logits
LAUNCH_TIMEOUT_S = 300.0

# Divisible by 4: q 8 heads × 4, GQA with 4 KV heads, SwiGLU f 64, V 64, RMSNorm, RoPE.
LLAMA = ModelSpec(name="llama-gqa", n_layers=1, d_model=32, n_heads=8, n_kv_heads=4,
                  head_dim=4, ffn_size=64, ffn_kind="swiglu", vocab_size=64,
                  tied_embeddings=False, position="rotary", max_seq_len=16, norm="rmsnorm",
                  norm_bias=False, qkv_bias=False, attn_out_bias=False, mlp_bias=False)
# GELU, LayerNorm and every bias (row-parallel biases stay whole); learned positions (whole).
GPT = ModelSpec(name="gpt-bias", n_layers=1, d_model=32, n_heads=4, ffn_size=128,
                ffn_kind="gelu", vocab_size=64, tied_embeddings=False, position="learned",
                max_seq_len=16, norm="layernorm", norm_bias=True, qkv_bias=True,
                attn_out_bias=True, mlp_bias=True, lm_head_bias=True)
GPT_SP = dataclasses.replace(GPT, name="gpt-bias-sp", position="none")  # SP splits positions
# FSDP2 x TP: odd TP-local sizes so that FSDP pads every kind of parameter at dp = 2
# (q, k, v 18/2 = 9 rows, f 30/2 = 15, V 98/2 = 49, d 21).
SPEC_2D = ModelSpec(name="tp-2d", n_layers=2, d_model=21, n_heads=2, n_kv_heads=2, head_dim=9,
                    ffn_size=30, ffn_kind="swiglu", vocab_size=98, tied_embeddings=False,
                    position="rotary", max_seq_len=16, norm="rmsnorm", norm_bias=False,
                    qkv_bias=False, attn_out_bias=False, mlp_bias=False)


def _layers(spec, n):
    return dataclasses.replace(spec, n_layers=n, name=f"{spec.name}-L{n}")


def _tp_cases(tp):
    """(name, case) for 1 and 2 layers of every variant at this TP degree."""
    variants = [("llama", LLAMA, {}), ("llama-sp", LLAMA, {"sequence_parallel": True}),
                ("llama-sp-gathered", LLAMA, {"sequence_parallel": True,
                                              "loss_parallel": False})]
    if tp == 2:
        variants += [("gpt", GPT, {}), ("gpt-gathered", GPT, {"loss_parallel": False}),
                     ("gpt-sp", GPT_SP, {"sequence_parallel": True})]
    return [TpCase(f"{name}-L{n}", _layers(spec, n), tp=tp, **kw)
            for name, spec, kw in variants for n in (1, 2)]


CASES_2D = [TpCase("2d-sp", SPEC_2D, tp=2, dp=2, sequence_parallel=True),
            TpCase("2d", SPEC_2D, tp=2, dp=2)]
RINGS = [RingCase("ring-allgather"), RingCase("ring-alltoall", rotate="alltoall")]


@pytest.fixture(scope="module")
def runs2():
    return launch(run_all, 2, (_tp_cases(2), RINGS, True), timeout_s=LAUNCH_TIMEOUT_S)


@pytest.fixture(scope="module")
def runs4():
    return launch(run_all, 4, (_tp_cases(4) + CASES_2D, RINGS), timeout_s=LAUNCH_TIMEOUT_S)


def _runs(request, world):
    return request.getfixturevalue(f"runs{world}")


# -- expectations --------------------------------------------------------------------------------
def _column_linears(spec):
    return 3 + (2 if spec.ffn_kind == "swiglu" else 1)  # q, k, v; gate, up (or up)


def _all_shapes(spec):
    units = spec.unit_parameter_shapes()
    blocks = [(f"blocks.{i}.{n}", s) for i in range(spec.n_layers) for n, s in units["block"]]
    return blocks + units["root"]


def _expected_tp(case, phase):
    """{kind: (calls, bytes)} of DTensor's collectives in ``phase`` ("forward", "backward",
    "step") for one micro-batch of ``case``."""
    spec, tokens = case.spec, case.micro_batch * case.seq_len
    layer = tpc.tp_layer_collectives(tokens, spec.d_model, ELEMENT_BYTES, case.tp,
                                     case.sequence_parallel,
                                     column_linears=_column_linears(spec), regather_input=False)
    head = tpc.tp_head_collectives(tokens, spec.d_model, spec.vocab_size, ELEMENT_BYTES, case.tp,
                                   case.sequence_parallel, case.loss_parallel,
                                   regather_input=False, target_logit_bytes=ELEMENT_BYTES)
    with_fsdp = case.dp > 1
    sync = tpc.tp_grad_sync(_all_shapes(spec), ELEMENT_BYTES, case.tp, case.sequence_parallel,
                            implementation="torch", reductions_per_tensor=1 if with_fsdp else 3)
    out = {}
    for kind in tpc.TP_KINDS:
        if phase == "step":
            calls = nbytes = 0.0
        else:
            calls = (spec.n_layers * getattr(layer, f"{phase}_{kind}_calls")
                     + getattr(head, f"{phase}_{kind}_calls"))
            nbytes = (spec.n_layers * getattr(layer, f"{phase}_{kind}_bytes")
                      + getattr(head, f"{phase}_{kind}_bytes"))
        if kind == "all_reduce" and phase == ("backward" if with_fsdp else "step"):
            calls, nbytes = calls + sync.calls, nbytes + sync.bytes
        out[kind] = (float(calls), float(nbytes))
    return out


def _measured(comm, prefix):
    """{kind: (calls, bytes)} of the ops whose name starts with ``prefix``."""
    from fsdpsim.measured.harness.fsdp_runs import collective_kind
    from fsdpsim.measured.harness.tp_runs import KINDS

    def _kind(op):
        return collective_kind(op, KINDS)

    out = {kind: [0.0, 0.0] for kind in (*tpc.TP_KINDS, "all_to_all", "other")}
    for op, rec in comm["ops"].items():
        if op.startswith(prefix):
            out[_kind(op)][0] += rec["calls"]
            out[_kind(op)][1] += rec["bytes"]
    return {k: tuple(v) for k, v in out.items()}


ALL_TP = [(2, c) for c in _tp_cases(2)] + [(4, c) for c in _tp_cases(4)] + [(4, c)
                                                                              for c in CASES_2D]


# -- TP collectives ------------------------------------------------------------------------------
@pytest.mark.parametrize("world,case", ALL_TP, ids=[f"W{w}-{c.name}" for w, c in ALL_TP])
def test_tp_collectives_exact(request, world, case):
    for rank, run in enumerate(_runs(request, world)):
        result = run[case.name]
        for phase in ("forward", "backward", "step"):
            measured = _measured(result[phase], "_c10d_functional.")
            expected = _expected_tp(case, phase)
            assert measured["all_to_all"] == measured["other"] == (0, 0), (phase, measured)
            for kind in tpc.TP_KINDS:
                assert measured[kind] == expected[kind], (rank, phase, kind, measured, expected)
            if case.dp == 1:  # without FSDP every collective is DTensor's
                assert not any(op.startswith("c10d.") for op in result[phase]["ops"])
        assert result["loss"] == pytest.approx(result["reference_loss"], abs=2e-5)


@pytest.mark.parametrize("world,name", [(2, "llama"), (2, "llama-sp"), (2, "gpt"),
                                        (2, "gpt-sp"), (4, "llama"), (4, "llama-sp")])
def test_tp_per_layer_and_root(request, world, name):
    """Two layers minus one layer is one layer; one layer minus that is the root."""
    run = _runs(request, world)[0]
    one, two = run[f"{name}-L1"], run[f"{name}-L2"]
    case = next(c for c in _tp_cases(world) if c.name == f"{name}-L1")
    spec, tokens = case.spec, case.micro_batch * case.seq_len
    layer = tpc.tp_layer_collectives(tokens, spec.d_model, ELEMENT_BYTES, case.tp,
                                     case.sequence_parallel,
                                     column_linears=_column_linears(spec), regather_input=False)
    head = tpc.tp_head_collectives(tokens, spec.d_model, spec.vocab_size, ELEMENT_BYTES, case.tp,
                                   case.sequence_parallel, regather_input=False,
                                   target_logit_bytes=ELEMENT_BYTES)
    rows = []
    for phase in ("forward", "backward"):
        m1 = _measured(one[phase], "_c10d_functional.")
        m2 = _measured(two[phase], "_c10d_functional.")
        for kind in tpc.TP_KINDS:
            per_layer = tuple(b - a for a, b in zip(m1[kind], m2[kind], strict=True))
            root = tuple(a - b for a, b in zip(m1[kind], per_layer, strict=True))
            want_layer = (getattr(layer, f"{phase}_{kind}_calls"),
                          getattr(layer, f"{phase}_{kind}_bytes"))
            want_root = (getattr(head, f"{phase}_{kind}_calls"),
                         getattr(head, f"{phase}_{kind}_bytes"))
            assert per_layer == want_layer, (phase, kind)
            assert root == want_root, (phase, kind)
            rows.append(f"  {phase:8s} {kind:14s} layer {per_layer} root {root}")
    print(f"\n{name} tp={world}:\n" + "\n".join(rows))


@pytest.mark.parametrize("world,case", [(w, c) for w, c in ALL_TP if c.dp == 1],
                         ids=[f"W{w}-{c.name}" for w, c in ALL_TP if c.dp == 1])
def test_tp_local_shapes_equal_torch(request, world, case):
    expected = dict(tpc.tp_local_shapes(_all_shapes(case.spec), case.tp))
    for run in _runs(request, world):
        assert run[case.name]["tp_shapes"] == expected
        assert run[case.name]["full_shapes"] == dict(_all_shapes(case.spec))


# -- FSDP2 x TP ----------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES_2D, ids=[c.name for c in CASES_2D])
def test_fsdp_tp_2d_exact(runs4, case):
    spec, dp, e = case.spec, case.dp, ELEMENT_BYTES
    units = tpc.tp_local_shapes(spec.unit_parameter_shapes(), case.tp)
    block, root = padded_numel(units["block"], dp), padded_numel(units["root"], dp)
    padded = root + spec.n_layers * block
    local_numel = sum(int(np.prod(s)) for _, s in tpc.tp_local_shapes(_all_shapes(spec),
                                                                        case.tp))
    n_tensors = len(_all_shapes(spec))
    for rank, run in enumerate(runs4):
        result = run[case.name]
        forward = _measured(result["forward"], "c10d.")
        backward = _measured(result["backward"], "c10d.")
        # FSDP2 default: the root stays gathered after forward; blocks are gathered again.
        assert forward["all_gather"] == (1 + spec.n_layers, e * padded)
        assert backward["all_gather"] == (spec.n_layers, e * spec.n_layers * block)
        assert backward["reduce_scatter"] == (1 + spec.n_layers, e * padded)
        assert forward["reduce_scatter"] == forward["all_reduce"] == (0, 0)
        state = result["state"]
        assert state["params_storage_bytes"] == e * padded / dp          # every rank, padded
        assert state["step_bytes"] == 4 * n_tensors
        if rank // case.tp == 0:  # dp-rank 0 holds full ceil(d0/dp)-row chunks
            assert state["params_bytes"] == e * padded / dp
            assert state["optimizer_bytes"] == 2 * e * padded / dp
    for tp_rank in range(case.tp):  # the dp ranks' local shards sum to the TP-local tensors
        shards = [runs4[dp_rank * case.tp + tp_rank][case.name]["state"]["params_bytes"]
                  for dp_rank in range(dp)]
        assert sum(shards) == e * local_numel
    print(f"\n{case.name}: padded {padded} elements (unpadded {local_numel}) per TP rank; "
          f"per rank {e * padded / dp:.0f} B params, {2 * e * padded / dp:.0f} B AdamW")


# -- context parallelism -------------------------------------------------------------------------
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("ring", RINGS, ids=[r.name for r in RINGS])
def test_ring_attention_exact(request, world, ring):
    rotate = {"allgather": "all_gather", "alltoall": "all_to_all"}[ring.rotate]
    tokens, kv_dim = ring.batch * ring.seq_len, ring.heads * ring.head_dim
    want = cpc.cp_ring_attention_bytes(tokens, kv_dim, ELEMENT_BYTES, world, 1,
                                       implementation="torch", rotate=rotate,
                                       grad_accum_bytes=ELEMENT_BYTES)
    for run in _runs(request, world):
        result = run[ring.name]
        assert result["max_error"] < 1e-5   # torch's ring computes exact causal attention
        forward = _measured(result["forward"], "_c10d_functional.")
        backward = _measured(result["backward"], "_c10d_functional.")
        assert forward[rotate] == (want.forward_calls, want.forward_bytes)
        dkv = (want.backward_dkv_calls, want.backward_dkv_bytes)
        if rotate == "all_gather":
            assert backward["all_gather"] == (want.backward_kv_calls,
                                              want.backward_kv_bytes)
            assert backward["all_to_all"] == dkv
        else:
            assert backward["all_to_all"] == (want.backward_kv_calls + dkv[0],
                                              want.backward_kv_bytes + dkv[1])
        share = cpc.cp_attention_flops_share(world, causal_skip=False)
        assert result["attention_flops"] == share * result["full_attention_flops"]


def test_context_parallel_does_not_run_on_cpu(runs2):
    """torch 2.13's ``context_parallel`` dispatches SDPA to the CUDA flash / efficient / cuDNN
    kernels only; on CPU SDPA lowers to ``_scaled_dot_product_flash_attention_for_cpu``, which
    has no DTensor sharding strategy. If this starts to pass, count its bytes instead."""
    for run in runs2:
        probe = run["context_parallel"]
        assert not probe["ok"]
        assert "_scaled_dot_product_flash_attention_for_cpu" in probe["error"]
        assert "sharding strategy" in probe["error"]
