"""The stages of :func:`fsdpsim.engine._evaluate`, each a short function of the prepared inputs
``g`` (:func:`fsdpsim.engine.prepare.prepare`) and the results the stages before it return
(:mod:`fsdpsim.engine.results`: :class:`~fsdpsim.engine.results.LayerCosts`,
:class:`~fsdpsim.engine.results.Communication`, :class:`~fsdpsim.engine.results.StepTimes`,
:class:`~fsdpsim.engine.results.Totals`, :class:`~fsdpsim.engine.results.TensorBytes`):
:func:`layer_costs` (stage 2: one layer and the root on one rank, a layer's tensor- and
context-parallel collectives), :func:`communication` (stage 3: the data- and pipeline-parallel
collectives, a layer as the FSDP schedule sees it), :func:`step_times` (stage 4:
a stage's micro-batch, the pipeline schedule, the step), :func:`totals` and
:func:`tensor_bytes` (per GPU per step), :func:`outputs` (stage 6: throughput, MFU/HFU and the
output mapping). Every formula is in :mod:`fsdpsim.costs`; these only compose them.
"""

from __future__ import annotations

import numpy as np

from fsdpsim.costs import compute
from fsdpsim.costs.compute import (all_of, any_of, as_values, maximum, may_be_shared, minimum,
                                   where)
from fsdpsim.engine import collectives, expert_comm, layers, metrics, moe, step
from fsdpsim.engine.inputs import Prepared
from fsdpsim.engine.results import (Communication, LayerCosts, LayerTimes, Rates, RootTimes,
                                    StepTimes, TensorBytes, Totals, replace)
from fsdpsim.engine.step import pick


def layer_costs(g: Prepared) -> LayerCosts:
    """Stage 2: compute of one layer and the root, one micro-batch, one rank; the layered
    model's two kinds of layer (``lt_d``, ``lt_m``; None for other grids), its expert
    all-to-alls (``ep``) and MoE share (``phi``), and a layer's tensor- and context-parallel
    collectives (``tpc``, ``cpc``)."""
    lt_d = lt_m = gqa = None
    r = layers.rates(g)
    w = layers.widths(g)
    # Layers of two kinds (dense, MoE), MLA, MTP (engine/moe.py); nothing for other grids.
    piped, layered, has_moe = layer_flags(g)
    core = None
    if layered:
        rates = moe.gemm_rates(g, r)
    if layered and moe.mla_everywhere(g):  # no row is the uniform layer: its attention core
        core = layers.attention_times(g, r, w, layers.switches(g))
        lt = None
    else:
        if layered:  # the GQA projections, the uniform layer's and the kinds' alike
            gqa = moe.gqa_gemm_times(g, w, rates, g.compute_bytes)
        lt = layers.layer_times(g, r, w, attention_gemm=gqa)
    rt = layers.root_times(g, r, w)
    ep, phi = expert_comm.NO_EXPERT_PARALLEL, 0.0
    if layered:
        lt_d, lt_m, ep_c = moe.layer_kinds(g, r, w, lt, rates, gqa, core)
        lt = lt_d
        if has_moe:
            ep, phi = ep_c, moe.moe_share(g)
            lt = moe.mix(lt_d, lt_m, phi)
        if any_of(g.mtp_layers > 0):
            mtp_fwd_s, mtp_bwd_s = moe.mtp_times(g, r, w, lt_d, lt_m, ep, rt)
            rt = replace(rt, head_fwd_s=rt.head_fwd_s + mtp_fwd_s,
                         head_bwd_s=rt.head_bwd_s + mtp_bwd_s,
                         root_fwd_s=rt.root_fwd_s + mtp_fwd_s,
                         root_bwd_s=rt.root_bwd_s + mtp_bwd_s)

    if any_of(g.grad_accum_pass_bytes > 0):
        lt, rt = fp32_accumulation(g, r, lt, rt)

    # A layer's tensor- and context-parallel collectives: they depend on its widths and times
    # and on the TP and CP groups alone (data-parallel ones in stage 3). Grids without tp > 1
    # (cp > 1) on any row skip them: all zero there (sweep speed).
    tpc = (collectives.tensor_parallel(g, r, lt) if any_of(g.tp > 1)
           else collectives.NO_TENSOR_PARALLEL)
    cpc = (collectives.context_parallel(g, lt, r) if any_of(g.cp > 1)
           else collectives.NO_CONTEXT_PARALLEL)
    return LayerCosts(piped=piped, r=r, w=w, lt=lt, rt=rt, layered=layered,
                      has_moe=has_moe, ep=ep, phi=phi, lt_d=lt_d, lt_m=lt_m, tpc=tpc, cpc=cpc)


def layer_flags(g: Prepared) -> tuple[bool, bool, bool]:
    """The branches :func:`layer_costs` takes on ``g``'s rows as a whole, as it sets them in
    its result: ``(piped, layered, has_moe)``: some row pipelined; some row of a layered model
    (MoE, MLA, q/k norms, MTP: the kinds ``lt_d``/``lt_m``, None otherwise); some row with MoE
    layers (the expert all-to-alls ``ep`` and MoE share ``phi``). The memo of distinct layers
    serves a group only rows computed with the same (:mod:`fsdpsim.engine.memo`)."""
    layered = moe.layered(g)
    return (bool(any_of(g.pp > 1)), layered, layered and bool(any_of(g.moe_layers > 0)))


def costly_layer(g: Prepared) -> bool:
    """Whether :func:`layer_costs` of ``g``'s rows is the costly kind worth evaluating on their
    distinct layers only (:mod:`fsdpsim.engine.distinct`): a layered model (MoE, MLA, MTP) or
    tensor- or context-parallel collectives on some row. A data-parallel dense layer costs
    less than finding and spreading the distinct ones (bench_sweep's data-parallel mix: 3-4 %
    slower)."""
    return moe.layered(g) or bool(any_of(g.tp > 1)) or bool(any_of(g.cp > 1))


def communication(g: Prepared, c: LayerCosts) -> Communication:
    """Stage 3: data- and pipeline-parallel communication per group, the recompute shares, and
    a layer's forward and backward with its exposed tensor- and context-parallel collectives
    (stage 2's) as the FSDP schedule sees them."""
    r, w, lt, has_moe, phi, ep = c.r, c.w, c.lt, c.has_moe, c.phi, c.ep
    piped = c.piped
    dpc_e = g_e = None
    tpc, cpc = c.tpc, c.cpc
    co = collectives.group_coefficients(g, r)
    p2p_s, p2p_bytes = collectives.pipeline_p2p(g, w, r) if piped else (0.0, 0.0)
    L_stage = where(g.pp > 1, g.layers_mid, g.n_layers)
    dpc = collectives.data_parallel(g, co, L_stage, r)
    if has_moe:  # MoE layers: their dense part, and their experts over the expert groups
        dpc, dpc_e, g_e = moe.data_parallel(g, r, co, dpc, L_stage, phi)
    f = step.fsdp_flags(g)

    # Recompute applies to the first K layers of each stage (all when recompute_layers < 0).
    rl = g.recompute_layers
    rc_share = where(rl < 0, 1.0, minimum(rl, L_stage) / L_stage)
    # A layer as the FSDP schedule sees it: compute plus its exposed TP/CP communication.
    block_fwd_s = lt.block_fwd_s + tpc.tp_layer_fwd_exposed_s + cpc.cp_layer_fwd_exposed_s
    # Full recompute replays the layer's forward, its TP/CP collectives with it (Megatron's
    # CheckpointFunction and torch's checkpoint rerun the forward ops, collectives included;
    # selective recompute reruns only the attention core, between them). torchtitan's op-level
    # policy saves the reduce-scatter outputs and the attention's, and reruns the all-gathers:
    # half the sequence-parallel TP collectives, all of them without sequence parallelism
    # (costs.activations [5]).
    rc_code = as_values(g.recompute)
    replay = tp_replay = where(rc_code == 2, rc_share, 0.0)
    block_bwd_s = (lt.block_bwd_s + rc_share * lt.recompute_s + tpc.tp_layer_bwd_exposed_s
                   + cpc.cp_layer_bwd_exposed_s
                   + replay * (tpc.tp_layer_fwd_exposed_s + cpc.cp_layer_fwd_exposed_s))
    if any_of(rc_code == 3):
        tp_replay = where(rc_code == 3, where(g.sequence_parallel > 0, 0.5, 1.0) * rc_share,
                          replay)
        block_bwd_s = block_bwd_s + where(rc_code == 3,
                                          tp_replay * tpc.tp_layer_fwd_exposed_s, 0.0)
    root_tp_s = tpc.tp_root_s
    if has_moe:  # the MoE layers' exposed all-to-alls (replayed with full recompute)
        block_fwd_s = block_fwd_s + phi * ep.fwd_exposed_s
        block_bwd_s = block_bwd_s + phi * (ep.bwd_exposed_s + replay * ep.fwd_exposed_s)

    return Communication(tpc=tpc, cpc=cpc, p2p_s=p2p_s, p2p_bytes=p2p_bytes, L_stage=L_stage,
                         dpc=dpc, dpc_e=dpc_e, g_e=g_e, f=f, rc_share=rc_share, replay=replay,
                         tp_replay=tp_replay, block_fwd_s=block_fwd_s, block_bwd_s=block_bwd_s,
                         root_tp_s=root_tp_s)


def step_times(g: Prepared, c: LayerCosts, m: Communication) -> StepTimes:
    """Stage 4: the optimizer, a stage's micro-batch with FSDP overlap, the pipeline schedule
    (pipelined rows) and the step."""
    piped, layered, has_moe, f, dpc = c.piped, c.layered, c.has_moe, m.f, m.dpc
    dpc_e, g_e = m.dpc_e, m.g_e
    rt, lt, lt_m, lt_d, ep, phi = c.rt, c.lt, c.lt_m, c.lt_d, c.ep, c.phi
    block_fwd_s, block_bwd_s, root_tp_s = m.block_fwd_s, m.block_bwd_s, m.root_tp_s
    rc_share, replay, p2p_s, L_stage = m.rc_share, m.replay, m.p2p_s, m.L_stage
    extra_moe, unpaired_s = None, 0.0
    n_params_stage = g.n_params_padded
    if piped:  # the first stage's states (embedding and its layers) set the optimizer's time
        n_params_stage = where(g.pp > 1, g.layers_first * g.block_numel_padded
                               + g.embed_numel_padded, n_params_stage)
    if layered:
        n_params_stage = n_params_stage + where(g.pp > 1, 0.0, g.mtp_numel_padded)
    if has_moe:  # dense parts of the first stage's layers, and its experts
        first_moe = where(g.pp > 1, g.moe_layers_first, g.moe_layers)
        n_params_stage = where(g.pp > 1, moe.stage_dense_numel(
            g, g.layers_first, g.moe_layers_first) + g.embed_numel_padded,
            n_params_stage)
    optimizer_s, post_step_s = step.optimizer_times(g, f, dpc, n_params_stage)
    if has_moe:
        n_experts_stage = (first_moe + where(g.pp > 1, 0.0, g.mtp_layers * g.mtp_moe)
                           ) * moe.expert_local_numel(g)
        optimizer_s = optimizer_s + step.optimizer_times(g_e, f, dpc_e, n_experts_stage)[0]
    post_total_s = post_step_s
    # every row pipelines: none takes the one-stage step (the pipelined one replaces it)
    all_piped = piped and all_of(g.pp > 1)
    root_fwd_s = rt.root_fwd_s + 0.5 * root_tp_s
    only = None if all_piped else step.stage_phases(
        g, f, dpc, g.n_layers, block_fwd_s, block_bwd_s, root_fwd_s,
        rt.root_bwd_s + 0.5 * root_tp_s, 1.0)
    if any_of(g.param_gather_overlap > 0):
        # Megatron's distributed optimizer overlaps the parameter all-gather with the next
        # step's forward (--overlap-param-gather): only what outlasts that forward shows.
        fwd_s = (step.forward_phases(g, f, dpc, g.n_layers, block_fwd_s, root_fwd_s, 1.0)
                 if only is None else only).fwd_s
        post_step_s = where(g.param_gather_overlap > 0, maximum(post_step_s - fwd_s, 0.0),
                            post_step_s)
    if all_piped:
        step_s = bubble_s = 0.0
        pipeline_ok = True
    else:
        step_s = step.data_parallel_step_s(g, f, only, optimizer_s, post_step_s)
        if type(step_s) is np.ndarray:
            bubble_s, pipeline_ok = np.zeros_like(step_s), np.ones(step_s.shape, dtype=bool)
        else:  # one configuration: numbers
            bubble_s, pipeline_ok = np.float64(0.0), np.True_
    if piped:
        mid = step.stage_phases(g, f, dpc, g.layers_mid, block_fwd_s, block_bwd_s, 0.0, 0.0,
                                0.0)
        root_ag = pick(f.fsdp_like, dpc.ag_root_s, 0.0)
        first_extra = ((g.layers_first - g.layers_mid) * block_fwd_s + rt.embed_fwd_s
                       + 0.5 * root_tp_s + root_ag,
                       (g.layers_first - g.layers_mid) * block_bwd_s + rt.embed_bwd_s)
        last_extra = ((g.layers_last - g.layers_mid) * block_fwd_s + rt.head_fwd_s
                      + 0.5 * root_tp_s + root_ag,
                      (g.layers_last - g.layers_mid) * block_bwd_s + rt.head_bwd_s
                      + 0.5 * root_tp_s)
        if has_moe:  # end stages whose share of MoE layers differs from the middle ones'
            d_fwd = lt_m.block_fwd_s + ep.fwd_exposed_s - lt_d.block_fwd_s
            d_bwd = (lt_m.block_bwd_s - lt_d.block_bwd_s
                     + rc_share * (lt_m.recompute_s - lt_d.recompute_s)
                     + ep.bwd_exposed_s + replay * ep.fwd_exposed_s)
            extra_moe = (g.moe_layers_first - g.moe_layers_mid
                         - (g.layers_first - g.layers_mid) * phi,
                         g.moe_layers_last - g.moe_layers_mid
                         - (g.layers_last - g.layers_mid) * phi)
            first_extra = (first_extra[0] + extra_moe[0] * d_fwd,
                           first_extra[1] + extra_moe[0] * d_bwd)
            last_extra = (last_extra[0] + extra_moe[1] * d_fwd,
                          last_extra[1] + extra_moe[1] * d_bwd)
        # Zero-bubble schedules split each backward into input- and weight-gradient passes;
        # the weight-gradient GEMMs are half of the GEMM backward FLOPs.
        wgrad_s = where(as_values(g.pp_schedule) == 3,
                        g.layers_mid * 0.5 * lt.gemm_bwd_s, 0.0)
        piped_step_s, piped_bubble_s, piped_ok = step.pipeline_step_s(
            g, f, mid, first_extra, last_extra, p2p_s, wgrad_s, optimizer_s, post_step_s)
        pp_on = g.pp > 1
        step_s = where(pp_on, piped_step_s, step_s)
        bubble_s = where(pp_on, piped_bubble_s, 0.0)
        pipeline_ok = where(pp_on, piped_ok, True)

    if has_moe:  # the overlapped all-to-alls of the warm-up and cool-down chunks show
        unpaired_s = expert_comm.unpaired_overlap_s(g, ep, L_stage, phi)
        step_s = step_s + unpaired_s

    return StepTimes(optimizer_s=optimizer_s, post_total_s=post_total_s, step_s=step_s,
                     bubble_s=bubble_s, pipeline_ok=pipeline_ok, extra_moe=extra_moe,
                     unpaired_s=unpaired_s)


def totals(g: Prepared, c: LayerCosts, m: Communication, st: StepTimes) -> Totals:
    """Times per GPU per step (the busiest stage): compute, each collective, the bounds."""
    k, piped, has_moe, lt, rt, lt_m = g.grad_accum, c.piped, c.has_moe, c.lt, c.rt, c.lt_m
    lt_d, ep = c.lt_d, c.ep
    phi, f, dpc = c.phi, m.f, m.dpc
    tpc, cpc, p2p_s, L_stage, rc_share = m.tpc, m.cpc, m.p2p_s, m.L_stage, m.rc_share
    replay = m.replay
    root_tp_s, extra_moe = m.root_tp_s, st.extra_moe
    optimizer_s, post_total_s, step_s = st.optimizer_s, st.post_total_s, st.step_s
    bubble_s, unpaired_s = st.bubble_s, st.unpaired_s
    # Pipelined rows hold the root's parts on their end stages only (the busier of the two).
    root_share = where(g.pp > 1, 0.0, 1.0) if piped else 1.0
    compute_mb_s = (L_stage * (lt.block_fwd_s
                               + (lt.block_bwd_s + rc_share * lt.recompute_s))
                    + rt.root_fwd_s * root_share + rt.root_bwd_s * root_share)
    if piped:
        first_s = (g.layers_first - g.layers_mid) * (lt.block_fwd_s + lt.block_bwd_s)
        last_s = (g.layers_last - g.layers_mid) * (lt.block_fwd_s + lt.block_bwd_s)
        if has_moe:  # end stages whose share of MoE layers differs from the middle ones'
            d_layer = (lt_m.block_fwd_s + lt_m.block_bwd_s - lt_d.block_fwd_s
                       - lt_d.block_bwd_s)
            first_s, last_s = first_s + extra_moe[0] * d_layer, last_s + extra_moe[1] * d_layer
        compute_mb_s = compute_mb_s + (1.0 - root_share) * maximum(
            first_s + rt.embed_fwd_s + rt.embed_bwd_s,
            last_s + rt.head_fwd_s + rt.head_bwd_s)
    compute_s = k * compute_mb_s + optimizer_s
    ag_calls = f.ag_calls
    fsdp_like = f.fsdp_like
    is_zero1, is_hybrid, is_ddp = f.is_zero1, f.is_hybrid, f.is_ddp
    ag_steps, rs_steps = f.ag_steps, f.rs_steps
    ag_per_mb_s = pick(fsdp_like, L_stage * dpc.ag_block_s * ag_calls + dpc.ag_root_s, 0.0)
    all_gather_s = ag_steps * ag_per_mb_s + post_total_s
    rs_per_mb_s = pick(f.rs_calls > 0, L_stage * dpc.rs_block_s + dpc.rs_root_s, 0.0)
    grads_ar = is_zero1 & (g.grad_all_reduce > 0)  # InternEvo's ZeRO-1 all-reduces them
    zero1_grads_s = where(is_zero1, L_stage * dpc.zero1_rs_block_s + dpc.zero1_rs_root_s,
                          0.0)
    reduce_scatter_s = rs_steps * rs_per_mb_s + where(grads_ar, 0.0, zero1_grads_s)
    all_reduce_s = (rs_steps * pick(is_hybrid, L_stage * dpc.hsdp_ar_block_s
                                    + dpc.hsdp_ar_root_s, 0.0)
                    + pick(is_ddp, L_stage * dpc.ddp_ar_block_s + dpc.ddp_ar_root_s, 0.0)
                    + pick(grads_ar, zero1_grads_s, 0.0))
    tp_replay = m.tp_replay
    tp_s = k * (L_stage * ((1.0 + tp_replay) * tpc.tp_layer_fwd_s + tpc.tp_layer_bwd_s)
                + root_tp_s)
    if (tpc.tp_layer_fwd_exposed_s is tpc.tp_layer_fwd_s
            and tpc.tp_layer_bwd_exposed_s is tpc.tp_layer_bwd_s
            and (type(tp_s) is not np.ndarray or may_be_shared(tp_s))):
        # none hidden: the same terms (a number, or rows fsdpsim.engine._evaluate copies apart)
        tp_exposed_s = tp_s
    else:
        tp_exposed_s = k * (L_stage * ((1.0 + tp_replay) * tpc.tp_layer_fwd_exposed_s
                                       + tpc.tp_layer_bwd_exposed_s)
                            + root_tp_s)
    cp_s = k * L_stage * ((1.0 + replay) * cpc.cp_layer_fwd_s + cpc.cp_layer_bwd_s)
    cp_exposed_s = k * L_stage * ((1.0 + replay) * cpc.cp_layer_fwd_exposed_s
                                  + cpc.cp_layer_bwd_exposed_s)
    pp_s = k * 2.0 * p2p_s
    comm_s = all_gather_s + reduce_scatter_s + all_reduce_s + tp_s + cp_s + pp_s
    moe_layers_stage = ep_s = ep_exposed_s = ep_bytes = moe_s = 0.0  # no MoE row: no cost
    if has_moe:
        moe_layers_stage = L_stage * phi
        ep_s = k * moe_layers_stage * ((1.0 + replay) * ep.fwd_s + ep.bwd_s)
        ep_exposed_s = k * moe_layers_stage * ((1.0 + replay) * ep.fwd_exposed_s
                                               + ep.bwd_exposed_s) + unpaired_s
        ep_bytes = k * moe_layers_stage * (ep.bytes + replay * ep.fwd_bytes)
        # the MoE MLPs (router, shared and routed experts, their kernels; the forward again
        # under full recompute) and their exposed all-to-alls
        moe_s = k * moe_layers_stage * (lt_m.moe_mlp_fwd_s + lt_m.moe_mlp_bwd_s
                                        + replay * lt_m.moe_mlp_fwd_s) + ep_exposed_s
        comm_s = comm_s + ep_s
    exposed_s = maximum(step_s - compute_s - bubble_s, 0.0)
    # Bounds: every stream fully overlapped (compute with its bubble; data-parallel collectives
    # on their communicator; tensor/context/pipeline traffic on theirs), and nothing overlapped.
    lower_s = maximum(maximum(compute_s + bubble_s, all_gather_s + reduce_scatter_s
                              + all_reduce_s), tp_s + cp_s + pp_s + ep_s)
    upper_s = compute_s + comm_s + bubble_s

    return Totals(root_share=root_share, compute_s=compute_s, grads_ar=grads_ar,
                  all_gather_s=all_gather_s, reduce_scatter_s=reduce_scatter_s,
                  all_reduce_s=all_reduce_s, tp_s=tp_s, tp_exposed_s=tp_exposed_s, cp_s=cp_s,
                  cp_exposed_s=cp_exposed_s, pp_s=pp_s, comm_s=comm_s,
                  moe_layers_stage=moe_layers_stage, ep_s=ep_s, ep_exposed_s=ep_exposed_s,
                  ep_bytes=ep_bytes, moe_s=moe_s, exposed_s=exposed_s, lower_s=lower_s,
                  upper_s=upper_s)


def tensor_bytes(g: Prepared, c: LayerCosts, m: Communication, tt: Totals) -> TensorBytes:
    """Tensor bytes per GPU per step of the data-parallel collectives."""
    has_moe, phi, f, L_stage = c.has_moe, c.phi, m.f, m.L_stage
    moe_layers_stage = tt.moe_layers_stage
    grads_ar = tt.grads_ar
    ag_calls, fsdp_like = f.ag_calls, f.fsdp_like
    is_zero1, is_hybrid, is_ddp = f.is_zero1, f.is_hybrid, f.is_ddp
    ag_steps, rs_steps = f.ag_steps, f.rs_steps
    # (the quantities torch's c10d ops see)
    elem = g.compute_bytes
    block_numel = g.block_numel_padded
    if has_moe:  # the stage's mean unit: dense layers, MoE layers' dense parts and experts
        block_numel = where(phi > 0, moe.stage_dense_numel(g, L_stage, moe_layers_stage)
                            / L_stage + phi * moe.expert_local_numel(g), block_numel)
    units_ag = L_stage * ag_calls * block_numel + where(fsdp_like, g.root_numel_padded, 0.0)
    all_params_padded = L_stage * block_numel + g.root_numel_padded
    all_gather_bytes = (ag_steps * units_ag + where(is_zero1, all_params_padded, 0.0)) * elem
    reduce_scatter_bytes = (rs_steps * where(f.rs_calls > 0, all_params_padded, 0.0)
                            + where(is_zero1 & np.logical_not(grads_ar), all_params_padded,
                                    0.0)) * g.reduce_bytes
    all_reduce_bytes = ((rs_steps * where(is_hybrid, all_params_padded / g.shard_size, 0.0)
                         + where(is_ddp, all_params_padded, 0.0)) * g.reduce_bytes
                        + where(grads_ar, all_params_padded * elem, 0.0))

    return TensorBytes(all_gather_bytes=all_gather_bytes,
                       reduce_scatter_bytes=reduce_scatter_bytes,
                       all_reduce_bytes=all_reduce_bytes)


def outputs(g: Prepared, c: LayerCosts, m: Communication, st: StepTimes, tt: Totals,
            tb: TensorBytes) -> dict:
    """Stage 6: throughput and utilisation, and the engine's outputs but memory's."""
    k, layered, lt, rt, ep, tpc = g.grad_accum, c.layered, c.lt, c.rt, c.ep, m.tpc
    cpc, p2p_bytes = m.cpc, m.p2p_bytes
    L_stage, rc_share, replay = m.L_stage, m.rc_share, m.replay
    root_share = tt.root_share
    step_s, compute_s, optimizer_s = st.step_s, tt.compute_s, st.optimizer_s
    bubble_s = st.bubble_s
    comm_s, exposed_s, lower_s, upper_s = tt.comm_s, tt.exposed_s, tt.lower_s, tt.upper_s
    pipeline_ok = st.pipeline_ok
    (all_gather_s, reduce_scatter_s, all_reduce_s, tp_s, tp_exposed_s, cp_s, cp_exposed_s, pp_s,
     ep_s, ep_exposed_s, ep_bytes, moe_s) = (
        tt.all_gather_s, tt.reduce_scatter_s, tt.all_reduce_s, tt.tp_s, tt.tp_exposed_s,
        tt.cp_s, tt.cp_exposed_s, tt.pp_s, tt.ep_s, tt.ep_exposed_s, tt.ep_bytes,
        tt.moe_s)
    all_gather_bytes, reduce_scatter_bytes, all_reduce_bytes = (
        tb.all_gather_bytes, tb.reduce_scatter_bytes, tb.all_reduce_bytes)
    gpus = g.num_gpus
    tokens_per_step = g.micro_batch * g.seq_len * k * g.dp
    model_flops = compute.model_flops_per_token(g.matmul_params, g.n_layers,
                                                g.seq_len, g.q_dim) * tokens_per_step
    hardware_flops = metrics.executed_flops_per_microbatch(g, rc_share) * k * g.dp
    if layered:  # per kind of layer, on the rows of layered models
        executed, model = moe.layered_flops(g, rc_share, k)
        rows = moe.layered_rows(g)
        hardware_flops = where(rows, executed, hardware_flops)
        model_flops = where(rows, model, model_flops)
    # MFU and HFU against the 16-bit dense peak for FP8 runs (the published tables'), MFU
    # against the compute precision's own peak beside it (fsdpsim.engine.metrics: conventions)
    mfu_peak_total = g.mfu_peak_flops_per_s * gpus
    mfu = model_flops / (step_s * mfu_peak_total)
    hfu = hardware_flops / (step_s * mfu_peak_total)
    mfu_native = model_flops / (step_s * g.peak_flops_per_s * gpus)

    gemm_total = k * (L_stage * (lt.gemm_fwd_s + lt.gemm_bwd_s)
                      + root_share * (rt.head_gemm_s + rt.head_gemm_bwd_s))
    attn_total = k * L_stage * (lt.attn_fwd_s + lt.attn_bwd_s)
    hbm_total = k * (L_stage * (lt.ew_fwd_s + lt.ew_bwd_s)
                     + root_share * (rt.loss_s + 3.0 * rt.embed_s)) + optimizer_s
    # The bottleneck and the thresholds are not the engine's: they come from its response to
    # each resource (fsdpsim.drivers.sensitivity, a post-pass on the configurations a report shows).

    out = {
        "step_time_s": step_s,
        "tokens_per_step": tokens_per_step,
        "tokens_per_s": tokens_per_step / step_s,
        "tokens_per_s_per_gpu": tokens_per_step / step_s / gpus,
        "mfu": mfu,
        "hfu": hfu,
        "mfu_native": mfu_native,
        "model_flops_per_step": model_flops,
        "hardware_flops_per_step": hardware_flops,
        "compute_s": compute_s,
        "gemm_s": gemm_total,
        "attention_s": attn_total,
        "memory_bound_s": hbm_total,
        "recompute_s": k * L_stage * rc_share * lt.recompute_s,
        "optimizer_s": optimizer_s,
        "comm_s": comm_s,
        "exposed_comm_s": exposed_s,
        "bubble_s": bubble_s,
        "step_lower_bound_s": lower_s,
        "step_upper_bound_s": upper_s,
        "all_gather_s": all_gather_s,
        "reduce_scatter_s": reduce_scatter_s,
        "all_reduce_s": all_reduce_s,
        "all_gather_bytes": all_gather_bytes,
        "reduce_scatter_bytes": reduce_scatter_bytes,
        "all_reduce_bytes": all_reduce_bytes,
        "tp_s": tp_s,
        "tp_exposed_s": tp_exposed_s,
        "tp_bytes": k * (L_stage * (tpc.tp_layer_bytes + m.tp_replay
                                    * tpc.tp_layer_fwd_bytes)
                         + tpc.tp_root_bytes),
        "cp_s": cp_s,
        "cp_exposed_s": cp_exposed_s,
        "cp_bytes": k * L_stage * (cpc.cp_layer_bytes + replay * cpc.cp_layer_fwd_bytes),
        "pp_s": pp_s,
        "pp_bytes": k * 2.0 * p2p_bytes,
        "ep_s": ep_s,
        "ep_exposed_s": ep_exposed_s,
        "ep_bytes": ep_bytes,
        "moe_s": moe_s,
        "pipeline_ok": pipeline_ok,
    }
    return out


def fp32_accumulation(g: Prepared, r: Rates, lt: LayerTimes,
                      rt: RootTimes) -> tuple[LayerTimes, RootTimes]:
    """Layer and root times with the framework's fp32 gradient accumulation pass [s]: after
    every micro-batch's backward, each parameter's 16-bit gradient is added into its fp32
    buffer (nanotron ``FP32GradientAccumulator.backward`` / ``_accumulate_grad``:
    ``fp32_grad.add_(half_param.grad)``, or the DDP hook's ``add_`` on the sync step), a
    memory-bound pass of ``grad_accum_pass_bytes`` per parameter of the rank (read 2, read 4,
    write 4) on the compute stream, not overlapped. The root of an unpipelined model holds a
    tied embedding once (``root_numel_padded``); with pipelining the first and last stages
    each hold their copy."""
    per_param = g.grad_accum_pass_bytes

    def pass_s(numel):
        return compute.memory_bound_time_s(numel * per_param, r.hbm)

    embed_s, head_s = pass_s(g.embed_numel_rank), pass_s(g.head_numel_rank)
    lt = replace(lt, block_bwd_s=lt.block_bwd_s + pass_s(g.block_numel_rank))
    rt = replace(rt, embed_bwd_s=rt.embed_bwd_s + embed_s, head_bwd_s=rt.head_bwd_s + head_s,
                 root_bwd_s=rt.root_bwd_s + pass_s(g.root_numel_padded))
    return lt, rt
