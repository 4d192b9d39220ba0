"""Cost functions (compute, comm, overlap): hand-worked reference values with tight tolerances.

Every literal below is worked out by hand in the comment next to it from the equation in the
function's docstring, so a changed factor, a dropped term or a swapped argument fails here.
Each function is also checked on array inputs (the vectorised path ``sweep`` uses).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdpsim.costs import arrays, comm, compute, overlap

RTOL = 1e-12

# Llama-3-8B layer shapes (Llama Team 2024, Table 3): d 4096, 32 heads of 128 (q 4096),
# 8 KV heads (kv 1024), SwiGLU f 14336, vocab 128256, 32 layers.
LLAMA3_8B = dict(d_model=4096, q_dim=4096, kv_dim=1024, ffn_size=14336, swiglu=True)
# Weights of one Llama-3-8B layer's matmuls (norms excluded):
# QKV (4096 + 2·1024)·4096 = 25,165,824; out 4096·4096 = 16,777,216;
# gate+up 2·14336·4096 = 117,440,512; down 4096·14336 = 58,720,256; sum 218,103,808.
LLAMA3_8B_LAYER_MATMUL_WEIGHTS = 218_103_808

# A round hardware point for the GEMM time model: R = 1e15 FLOP/s achievable matmul rate,
# W = 3e12 B/s achievable HBM bandwidth, n_1/2 = 4e9 FLOP (tail 4 µs), k_1/2 = 64.
GEMM_HW = dict(matmul_flops_per_s=1e15, hbm_bytes_per_s=3e12, half_flops=4e9, half_k=64.0)


# ================================================================== compute: FLOPs
class TestFlops:
    def test_layer_matmul_flops_llama3_8b(self):
        # 2 · T · Σ n·k = 2 · 8192 · 218,103,808 = 3,573,412,790,272 FLOP
        got = compute.layer_matmul_flops_fwd(8192, **LLAMA3_8B)
        assert got == pytest.approx(3_573_412_790_272, rel=RTOL)
        assert 2 * 8192 * LLAMA3_8B_LAYER_MATMUL_WEIGHTS == 3_573_412_790_272

    def test_layer_matmul_flops_gelu_mha(self):
        # GPT-3 125M layer: d = q = kv = 768, GELU f = 3072.
        # Σ n·k = 3·768·768 (QKV) + 768·768 (out) + 3072·768 (up) + 768·3072 (down)
        #       = 1,769,472 + 589,824 + 2,359,296 + 2,359,296 = 7,077,888 = 12·d²
        # T = 2048 → 2 · 2048 · 7,077,888 = 28,991,029,248 FLOP
        got = compute.layer_matmul_flops_fwd(2048, 768, 768, 768, 3072, swiglu=False)
        assert got == pytest.approx(28_991_029_248, rel=RTOL)

    def test_layer_matmul_flops_moe_repeats_the_mlp(self):
        # Mixtral layer, one expert f_e = 14336, top-2: attention as Llama-3-8B
        # (25,165,824 + 16,777,216 = 41,943,040) plus 2 × (3 · 4096 · 14336 = 176,160,768)
        # = 394,264,576 weights per token; T = 1 → 788,529,152 FLOP.
        got = compute.layer_matmul_flops_fwd(1, 4096, 4096, 1024, 14336, True, active_experts=2)
        assert got == pytest.approx(788_529_152, rel=RTOL)

    def test_layer_matmul_flops_vectorised(self):
        tokens = np.array([1.0, 8192.0, 4096.0])
        got = compute.layer_matmul_flops_fwd(tokens, **LLAMA3_8B)
        np.testing.assert_allclose(got, 2 * tokens * LLAMA3_8B_LAYER_MATMUL_WEIGHTS, rtol=RTOL)

    def test_attention_flops_full_square_and_causal_half(self):
        # full: 4 · b · s² · q = 4 · 2 · 4096² · 4096 = 8 · 4096³ = 549,755,813,888
        full = compute.attention_flops_fwd(2, 4096, 4096, causal=False)
        assert full == pytest.approx(549_755_813_888, rel=RTOL)
        # causal (FlashAttention skips the upper triangle): half = 274,877,906,944
        causal = compute.attention_flops_fwd(2, 4096, 4096, causal=True)
        assert causal == pytest.approx(274_877_906_944, rel=RTOL)

    def test_attention_flops_of_one_context_parallel_ranks_queries(self):
        # b·s/cp = 2 · 4096 / 4 = 2,048 queries against 4,096 keys: 4 · 2048 · 4096 · 4096 =
        # 137,438,953,472, a quarter of the full square above; causal half: 68,719,476,736
        got = compute.attention_flops_fwd_of_queries(2048, 4096, 4096, causal=np.array(
            [False, True]))
        np.testing.assert_allclose(got, [137_438_953_472, 68_719_476_736], rtol=RTOL)

    def test_attention_flops_vectorised_over_causal_flag(self):
        got = compute.attention_flops_fwd(1, 64, 256, causal=np.array([True, False]))
        # 4 · 1 · 64² · 256 = 4,194,304 full; 2,097,152 causal
        np.testing.assert_allclose(got, [2_097_152, 4_194_304], rtol=RTOL)

    def test_lm_head_flops(self):
        # 2 · T · d · V = 2 · 8192 · 4096 · 128256 = 8,607,114,461,184
        assert compute.lm_head_flops_fwd(8192, 4096, 128256) == pytest.approx(
            8_607_114_461_184, rel=RTOL)

    def test_model_flops_per_token_palm(self):
        # Llama-3-8B: N_mm = 32 · 218,103,808 + 128256 · 4096 (LM head)
        #                  = 6,979,321,856 + 525,336,576 = 7,504,658,432
        # 6 · N_mm = 45,027,950,592; 12 · L · s · q = 12 · 32 · 8192 · 4096 = 12,884,901,888
        # total 57,912,852,480 FLOP per token at s = 8192
        n_mm = 32 * LLAMA3_8B_LAYER_MATMUL_WEIGHTS + 128256 * 4096
        assert n_mm == 7_504_658_432
        got = compute.model_flops_per_token(n_mm, 32, 8192, 4096)
        assert got == pytest.approx(57_912_852_480, rel=RTOL)

    def test_model_flops_per_token_matches_flop_counter_table(self):
        # tests/data/reference/torch_validation_on_cpu.md §3: V512 d256 L2 s64 B4 measured 2,717,908,992 FLOP.
        # N_mm = 2·(4·256² + 2·1024·256) + 512·256 = 1,703,936; T = 256 tokens;
        # per token 6·1,703,936 + 12·2·64·256 = 10,223,616 + 393,216 = 10,616,832;
        # × 256 = 2,717,908,992.
        got = compute.model_flops_per_token(1_703_936, 2, 64, 256) * 256
        assert got == pytest.approx(2_717_908_992, rel=RTOL)


# ================================================================== compute: time
class TestGemmTime:
    def test_compute_bound(self):
        # m = n = k = 4096: F = 2·4096³ = 137,438,953,472 FLOP, tile eff 4096/(4096+64)
        # compute = F / (1e15 · 4096/4160) = 2·4096²·4160 / 1e15 = 1.3958643712e-4 s
        # traffic = 2 B · 3·4096² = 100,663,296 B / 3e12 = 3.3554432e-5 s (smaller)
        # tail = 4e9 / 1e15 = 4e-6 s → 1.4358643712e-4 s
        got = compute.gemm_time_s(4096, 4096, 4096, **GEMM_HW)
        assert got == pytest.approx(1.4358643712e-4, rel=RTOL)

    def test_memory_bound(self):
        # m = 65536, n = k = 128: F = 2·65536·128·128 = 2,147,483,648 FLOP,
        # tile eff 128/192 = 2/3 → compute 3.221225472e-6 s;
        # traffic = 2·(65536·128 + 128·128 + 65536·128) = 33,587,200 B; at W = 2e12:
        # 1.67936e-5 s (larger) + tail 4e-6 s = 2.07936e-5 s
        hw = dict(GEMM_HW, hbm_bytes_per_s=2e12)
        got = compute.gemm_time_s(65536, 128, 128, **hw)
        assert got == pytest.approx(2.07936e-5, rel=RTOL)

    def test_tile_efficiency_is_k_over_k_plus_k_half(self):
        # No tail, infinite bandwidth: t = 2mnk / (R · k/(k + k_half)).
        # k = k_half = 64 → exactly twice the peak-rate time 2·1000·1000·64/1e15 = 1.28e-7.
        hw = dict(matmul_flops_per_s=1e15, hbm_bytes_per_s=np.inf, half_flops=0.0, half_k=64.0)
        assert compute.gemm_time_s(1000, 1000, 64, **hw) == pytest.approx(2.56e-7, rel=RTOL)
        # k = 192 → eff 0.75: 2·1000·1000·192 / 0.75e15 = 5.12e-7
        assert compute.gemm_time_s(1000, 1000, 192, **hw) == pytest.approx(5.12e-7, rel=RTOL)
        # k_half = 0 → peak rate: 2·1000·1000·64 / 1e15 = 1.28e-7
        hw0 = dict(hw, half_k=0.0)
        assert compute.gemm_time_s(1000, 1000, 64, **hw0) == pytest.approx(1.28e-7, rel=RTOL)

    def test_hockney_tail_is_added_once(self):
        # A vanishing GEMM costs just the tail n_1/2 / R = 4e9 / 1e15 = 4e-6 s; doubling
        # R halves it.
        assert compute.gemm_time_s(1, 1, 1, **dict(GEMM_HW, hbm_bytes_per_s=np.inf)) == \
            pytest.approx(4e-6 + 2.0 * 65 / 1e15, rel=RTOL)  # + 2·1·1·1/(1e15·1/65)
        hw2 = dict(GEMM_HW, matmul_flops_per_s=2e15, hbm_bytes_per_s=np.inf)
        assert compute.gemm_time_s(1, 1, 1, **hw2) == pytest.approx(2e-6 + 2.0 * 65 / 2e15,
                                                                    rel=RTOL)

    def test_elem_bytes_scales_traffic(self):
        # The memory-bound case at 4 B per element: 2 × 1.67936e-5 + 4e-6 = 3.75872e-5 s
        hw = dict(GEMM_HW, hbm_bytes_per_s=2e12)
        got = compute.gemm_time_s(65536, 128, 128, **hw, elem_bytes=4.0)
        assert got == pytest.approx(3.75872e-5, rel=RTOL)

    def test_vectorised(self):
        hw = dict(GEMM_HW, hbm_bytes_per_s=np.array([3e12, 2e12]))
        got = compute.gemm_time_s(np.array([4096, 65536]), np.array([4096, 128]),
                                  np.array([4096, 128]), **hw)
        np.testing.assert_allclose(got, [1.4358643712e-4, 2.07936e-5], rtol=RTOL)


class TestLinearTime:
    def test_forward_and_backward(self):
        # x: (8192 × 4096), W: (1024 × 4096); every GEMM 2·8192·1024·4096 = 68,719,476,736
        # FLOP and compute bound at 3e12 B/s (traffic ≤ 92,274,688 B → ≤ 3.1e-5 s):
        # fwd   (m=8192, n=1024, k=4096): F·4160/4096 /1e15 = 6.979321856e-5 + 4e-6
        #       = 7.379321856e-5 s
        # dgrad (m=8192, n=4096, k=1024): F·1088/1024 /1e15 = 7.3014444032e-5 + 4e-6
        # wgrad (m=1024, n=4096, k=8192): F·8256/8192 /1e15 = 6.9256347648e-5 + 4e-6
        # bwd = 7.7014444032e-5 + 7.3256347648e-5 = 1.5027079168e-4 s
        fwd, bwd = compute.linear_time_s(8192, 1024, 4096, **GEMM_HW)
        assert fwd == pytest.approx(7.379321856e-5, rel=RTOL)
        assert bwd == pytest.approx(1.5027079168e-4, rel=RTOL)

    def test_layer_gemm_times_sum_the_linears(self):
        # One layer = Σ over its four GEMM shapes, MLP repeated active_experts times.
        args = (GEMM_HW["matmul_flops_per_s"], GEMM_HW["hbm_bytes_per_s"],
                GEMM_HW["half_flops"], GEMM_HW["half_k"])
        fwd, bwd = compute.layer_gemm_times_s(2048, 4096, 4096, 1024, 14336, True, 2, *args)
        shapes = [(6144, 4096, 1), (4096, 4096, 1), (28672, 4096, 2), (4096, 14336, 2)]
        exp_f = sum(m * compute.linear_time_s(2048, n, k, *args)[0] for n, k, m in shapes)
        exp_b = sum(m * compute.linear_time_s(2048, n, k, *args)[1] for n, k, m in shapes)
        assert fwd == pytest.approx(exp_f, rel=RTOL)
        assert bwd == pytest.approx(exp_b, rel=RTOL)


class TestElementwiseAndLaunch:
    def test_elementwise_bytes_swiglu_rotary_gqa(self):
        # T = 1000, 2 B: Llama-3-8B layer (d 4096, q 4096, kv 1024, f 14336)
        # fwd per token: 10d + 3f + 2(q + kv) = 40,960 + 43,008 + 10,240 = 94,208
        #   → 2000 · 94,208 = 188,416,000 B
        # bwd per token: 16d + 5f + 2(q + kv) = 65,536 + 71,680 + 10,240 = 147,456
        #   → 2000 · 147,456 = 294,912,000 B
        fwd, bwd = compute.layer_elementwise_bytes(1000, 4096, 4096, 1024, 14336, True, True)
        assert fwd == pytest.approx(188_416_000, rel=RTOL)
        assert bwd == pytest.approx(294_912_000, rel=RTOL)

    def test_elementwise_bytes_gelu_with_biases(self):
        # T = 1000, 2 B, GPT-3 125M (d = q = kv = 768, f = 3072), no rotary, biases:
        # fwd: 10·768 + 2·3072 = 13,824 → 27,648,000 B
        # bwd: 16·768 + 3·3072 + bias grads ((768 + 2·768) + 768 + 3072 + 768 = 6,912)
        #    = 12,288 + 9,216 + 6,912 = 28,416 → 56,832,000 B
        fwd, bwd = compute.layer_elementwise_bytes(1000, 768, 768, 768, 3072, False, False,
                                                   linear_bias=True)
        assert fwd == pytest.approx(27_648_000, rel=RTOL)
        assert bwd == pytest.approx(56_832_000, rel=RTOL)

    def test_elementwise_bytes_fp32_doubles(self):
        fwd2, bwd2 = compute.layer_elementwise_bytes(1000, 768, 768, 768, 3072, False, False)
        fwd4, bwd4 = compute.layer_elementwise_bytes(1000, 768, 768, 768, 3072, False, False,
                                                     act_bytes=4.0)
        # no biases: fwd 27,648,000 (above); bwd 2000·(12,288 + 9,216) = 43,008,000
        assert (fwd2, bwd2) == (pytest.approx(27_648_000, rel=RTOL),
                                pytest.approx(43_008_000, rel=RTOL))
        assert (fwd4, bwd4) == (pytest.approx(55_296_000, rel=RTOL),
                                pytest.approx(86_016_000, rel=RTOL))

    def test_memory_bound_time(self):
        # 3e9 B / 2.5e12 B/s = 1.2e-3 s
        assert compute.memory_bound_time_s(3e9, 2.5e12) == pytest.approx(1.2e-3, rel=RTOL)

    def test_attention_time(self):
        # tile law n/(n + k_half) on the 4th argument (the loop length of one tile):
        # 1e12 FLOP at 1e15 · 0.5 · 128/(128 + 64) = 3.333...e14 FLOP/s → 3e-3 s
        got = compute.attention_time_s(1e12, 1e15, 0.5, 128, 64)
        assert got == pytest.approx(3e-3, rel=RTOL)
        # no tile overhead (k_half = 0) → 1e12 / 5e14 = 2e-3 s
        assert compute.attention_time_s(1e12, 1e15, 0.5, 128, 0.0) == pytest.approx(2e-3,
                                                                                   rel=RTOL)

    def test_attention_time_default_has_no_tile_penalty(self):
        # default loop length = inf: tile efficiency 1 (not inf/inf) → 1e12 / 5e14 = 2e-3 s
        assert compute.attention_time_s(1e12, 1e15, 0.5) == pytest.approx(2e-3, rel=RTOL)
        assert compute.attention_time_s(1e12, 1e15, 0.5, np.inf, 64.0) == pytest.approx(
            2e-3, rel=RTOL)

    def test_launch_bound(self):
        # GPU-bound: max(1e-4, 12 · 5e-6 = 6e-5) = 1e-4; launch-bound: max(1e-5, 6e-5) = 6e-5
        got = compute.launch_bound_s(np.array([1e-4, 1e-5]), 12, 5e-6)
        np.testing.assert_allclose(got, [1e-4, 6e-5], rtol=RTOL)


# ================================================================== comm: bytes
# The tiny GPT of tests/data/reference/torch_validation_on_cpu.md §1 (vocab 501, d 256, learned positions 64).
TINY_ROOT = [("tok_emb.weight", (501, 256)), ("pos_emb.weight", (64, 256)),
             ("norm.weight", (256,)), ("lm_head.weight", (501, 256))]


class TestPaddedNumel:
    def test_fsdp2_per_parameter_dim0(self):
        # W = 4: vocab 501 → 504 rows (×2 tables); 64 and 256 already divide.
        # 504·256 + 64·256 + 256 + 504·256 = 129,024 + 16,384 + 256 + 129,024 = 274,688
        assert comm.padded_numel(TINY_ROOT, 4) == 274_688
        # W = 2: 501 → 502 rows: 128,512 + 16,384 + 256 + 128,512 = 273,664 (the FSDPMemTracker
        # root size in tests/data/reference/torch_validation_on_cpu.md §4a)
        assert comm.padded_numel(TINY_ROOT, 2) == 273_664
        # W = 3: 501 = 3·167 stays, 64 → 66 rows, the 1-D norm 256 → 258:
        # 128,256 + 66·256 + 258 + 128,256 = 128,256 + 16,896 + 258 + 128,256 = 273,666
        assert comm.padded_numel(TINY_ROOT, 3) == 273_666

    def test_fsdp1_flat(self):
        # unpadded: 128,256 + 16,384 + 256 + 128,256 = 273,152 (divisible by 4 and 2)
        assert comm.padded_numel(TINY_ROOT, 4, per_parameter=False) == 273_152
        # W = 3: ceil(273,152 / 3) · 3 = 91,051 · 3 = 273,153
        assert comm.padded_numel(TINY_ROOT, 3, per_parameter=False) == 273_153

    def test_vectorised_over_shard_size(self):
        got = comm.padded_numel(TINY_ROOT, np.array([1, 2, 3, 4]))
        np.testing.assert_array_equal(got, [273_152, 273_664, 273_666, 274_688])
        flat = comm.padded_numel(TINY_ROOT, np.array([1, 3, 4]), per_parameter=False)
        np.testing.assert_array_equal(flat, [273_152, 273_153, 273_152])


# ================================================================== comm: ring time
RING = dict(link_latency_s=1e-6, nic_latency_s=5e-6)


class TestRingTime:
    def test_single_node(self):
        # k = 8 in one node: (k−1)/k · M / link + (k−1)·α_link
        # = 7/8 · 1e9 / 4e11 + 7·1e-6 = 2.1875e-3 + 7e-6 = 2.1945e-3 s
        got = comm.ring_time_s(1e9, 8, 8, 4e11, 4e10, **RING)
        assert got == pytest.approx(2.1945e-3, rel=RTOL)

    def test_multi_node_nic_bound(self):
        # k = 16 over 2 nodes, g = 8: busbw = min(4e11, 8 · 4e10 = 3.2e11) = 3.2e11
        # 15 · (1e9/16 / 3.2e11 + 5e-6) = 15 · (1.953125e-4 + 5e-6) = 3.0046875e-3 s
        got = comm.ring_time_s(1e9, 16, 8, 4e11, 4e10, **RING)
        assert got == pytest.approx(3.0046875e-3, rel=RTOL)

    def test_multi_node_link_bound(self):
        # g · nic = 8 · 1e11 = 8e11 > link 4e11 → busbw = 4e11
        # 15 · (6.25e7 / 4e11 + 5e-6) = 15 · 1.6125e-4 = 2.41875e-3 s
        got = comm.ring_time_s(1e9, 16, 8, 4e11, 1e11, **RING)
        assert got == pytest.approx(2.41875e-3, rel=RTOL)

    def test_one_member_per_node_uses_only_the_nic(self):
        # k = 4, g = 1: every edge crosses nodes, busbw = nic = 5e10 (the link drops out even
        # when it is slower)
        # 3 · (2.5e8 / 5e10 + 5e-6) = 3 · 5.005e-3 = 1.5015e-2 s
        got = comm.ring_time_s(1e9, 4, 1, 1e9, 5e10, **RING)
        assert got == pytest.approx(1.5015e-2, rel=RTOL)

    def test_all_reduce_is_twice_all_gather(self):
        ks = np.array([2, 8, 16, 64])
        ag = comm.ring_time_s(1e9, ks, 8, 4e11, 4e10, **RING)
        ar = comm.ring_time_s(1e9, ks, 8, 4e11, 4e10, passes=2.0, **RING)
        np.testing.assert_allclose(ar, 2.0 * ag, rtol=RTOL)

    def test_group_of_one_is_free(self):
        assert comm.ring_time_s(1e9, 1, 8, 4e11, 4e10, **RING) == 0.0

    def test_vectorised(self):
        got = comm.ring_time_s(1e9, np.array([8, 16, 16, 4]), np.array([8, 8, 8, 1]),
                               np.array([4e11, 4e11, 4e11, 1e9]),
                               np.array([4e10, 4e10, 1e11, 5e10]), **RING)
        np.testing.assert_allclose(got, [2.1945e-3, 3.0046875e-3, 2.41875e-3, 1.5015e-2],
                                   rtol=RTOL)


class TestCalls:
    # (all-gather, reduce-scatter, all-reduce) per block unit per micro-batch
    @pytest.mark.parametrize("strategy, reshard, expected", [
        ("full", True, (2, 1, 0)),       # gather in forward and again in backward
        ("full", False, (1, 1, 0)),      # kept from forward to backward
        ("grad_op", True, (1, 1, 0)),    # ZeRO-2 never reshards after forward
        ("grad_op", False, (1, 1, 0)),
        ("optimizer", True, (0, 0, 0)),  # ZeRO-1: once per step, not per micro-batch
        ("none", True, (0, 0, 0)),       # DDP: once per step
        ("hybrid", True, (2, 1, 1)),     # full within the shard group + AR across replicas
        ("hybrid", False, (1, 1, 1)),
    ])
    def test_per_microbatch(self, strategy, reshard, expected):
        got = comm.fsdp_calls_per_microbatch(comm.STRATEGY_CODES[strategy], reshard)
        assert tuple(float(v) for v in got) == expected

    @pytest.mark.parametrize("strategy, expected", [
        ("full", (0, 0, 0)), ("grad_op", (0, 0, 0)), ("optimizer", (1, 1, 0)),
        ("none", (0, 0, 1)), ("hybrid", (0, 0, 0)),
    ])
    def test_per_step(self, strategy, expected):
        got = comm.fsdp_calls_per_step(comm.STRATEGY_CODES[strategy])
        assert tuple(float(v) for v in got) == expected

    def test_vectorised(self):
        codes = np.arange(5)
        ag, rs, ar = comm.fsdp_calls_per_microbatch(codes, np.array([1, 1, 1, 1, 0]))
        np.testing.assert_array_equal(ag, [2, 1, 0, 0, 1])
        np.testing.assert_array_equal(rs, [1, 1, 0, 0, 1])
        np.testing.assert_array_equal(ar, [0, 0, 0, 0, 1])


# ================================================================== overlap
class TestOverlap:
    def test_slowed_compute(self):
        # f (1 + σ min(1, c/f)): 10·(1 + 0.05·0.4) = 10.2; c > f saturates: 10·1.05 = 10.5;
        # no compute stays 0; no comm stays f.
        got = overlap.slowed_compute_s(np.array([10.0, 10.0, 0.0, 10.0]),
                                       np.array([4.0, 40.0, 5.0, 0.0]), 0.05)
        np.testing.assert_allclose(got, [10.2, 10.5, 0.0, 10.0], rtol=RTOL)

    def test_pipelined_phase_compute_bound(self):
        # σ = 0: c_first + (n−1)·max(f, c) + f + c_last = 3 + 4 · 10 + 10 + 2 = 55
        got = overlap.pipelined_phase_s(3.0, 4.0, 10.0, 5, 2.0, 0.0)
        assert got == pytest.approx(55.0, rel=RTOL)

    def test_pipelined_phase_comm_bound(self):
        # σ = 0, c = 12 > f = 10: 3 + 4 · 12 + 10 + 2 = 63
        got = overlap.pipelined_phase_s(3.0, 12.0, 10.0, 5, 2.0, 0.0)
        assert got == pytest.approx(63.0, rel=RTOL)

    def test_pipelined_phase_single_stage(self):
        # n = 1, σ = 0: c_first + f + c_last = 3 + 10 + 2 = 15 (the stage comm never runs)
        assert overlap.pipelined_phase_s(3.0, 4.0, 10.0, 1, 2.0, 0.0) == \
            pytest.approx(15.0, rel=RTOL)

    def test_pipelined_phase_vectorised(self):
        got = overlap.pipelined_phase_s(3.0, np.array([4.0, 12.0]), 10.0, np.array([5, 1]),
                                        2.0, 0.0)
        np.testing.assert_allclose(got, [55.0, 15.0], rtol=RTOL)

    def test_pipelined_phase_slowdown_grows_the_phase(self):
        # σ > 0 stretches only compute: longer than σ = 0 when compute bound (no change when
        # the collectives hide the slowed compute), never beyond the serial sum
        # c_first + n·f + (n−1)·c + c_last.
        slow = overlap.pipelined_phase_s(3.0, np.array([4.0, 12.0]), 10.0, 5, 2.0, 0.05)
        assert slow[0] > 55.0
        assert slow[1] >= 63.0
        assert np.all(slow <= [3 + 50 + 16 + 2, 3 + 50 + 48 + 2])

    def test_pipelined_phase_slows_only_overlapped_computes(self):
        # Only the n − 1 computes that run beside the next unit's collective are slowed.
        # f' = 10·(1 + 0.05·0.4) = 10.2 on the 4 overlapped stages; the last compute is plain:
        # 3 + 4 · 10.2 + 10 + 2 = 55.8
        assert overlap.pipelined_phase_s(3.0, 4.0, 10.0, 5, 2.0, 0.05) == \
            pytest.approx(55.8, rel=RTOL)
        # comm bound, f' = 10.5 < c = 12 hides the slowdown: 3 + 4 · 12 + 10 + 2 = 63
        assert overlap.pipelined_phase_s(3.0, 12.0, 10.0, 5, 2.0, 0.05) == \
            pytest.approx(63.0, rel=RTOL)
        # n = 1: nothing overlaps: 3 + 10 + 2 = 15
        assert overlap.pipelined_phase_s(3.0, 4.0, 10.0, 1, 2.0, 0.05) == \
            pytest.approx(15.0, rel=RTOL)

    @settings(max_examples=50, deadline=None)
    @given(first=st.floats(0, 10), c=st.floats(0, 50), f=st.floats(0, 50),
           n=st.integers(1, 200), last=st.floats(0, 10), sigma=st.floats(0, 1))
    def test_pipelined_phase_between_perfect_and_no_overlap(self, first, c, f, n, last, sigma):
        # Perfect overlap: max(n·f, c_first + (n−1)·c + c_last); none: their sum.
        t = overlap.pipelined_phase_s(first, c, f, n, last, sigma)
        comm_total = first + (n - 1) * c + last
        assert t >= max(n * f, comm_total) * (1 - 1e-12)
        assert t <= (n * f + comm_total) * (1 + 1e-12)

    def test_step_bounds(self):
        lower, upper = overlap.step_bounds_s(np.array([5.0, 2.0]), np.array([3.0, 7.0]))
        np.testing.assert_allclose(lower, [5.0, 7.0], rtol=RTOL)
        np.testing.assert_allclose(upper, [8.0, 9.0], rtol=RTOL)


_SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.5, -2.25, 5e-324, 1e308])


@contextlib.contextmanager
def _sides_shared(shared: bool):
    """The selects inside with sides shared or not (:func:`fsdpsim.costs.compute.share_sides`,
    as the engine's evaluation sets it), the setting before restored after."""
    before = compute.share_sides(shared)
    try:
        yield
    finally:
        compute.share_sides(before)


@pytest.mark.parametrize("a_kind", ["array", "float", "np_float", "zero_d", "int"])
@pytest.mark.parametrize("b_kind", ["array", "float", "row", "int"])
def test_where_selects_the_bits_np_where_selects(a_kind, b_kind):
    """compute.where's branch-free select on long masks returns np.where's values bit for bit
    (NaN, -0.0, infinities, subnormals), its dtype and its shape, for arrays and numbers."""
    rng = np.random.default_rng(7)
    n = 3 * arrays._BIT_SELECT_MIN
    cond = rng.random((2, n)) > 0.5
    values = {"array": lambda: rng.choice(_SPECIAL, (2, n)), "float": lambda: -0.0,
              "np_float": lambda: np.float64(np.nan), "zero_d": lambda: np.array(np.inf),
              "row": lambda: rng.choice(_SPECIAL, n), "int": lambda: 3}
    a, b = values[a_kind](), values[b_kind]()
    got, want = compute.where(cond, a, b), np.where(cond, a, b)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("cond_kind", ["all", "none", "true", "false", "np_true", "mixed"])
@pytest.mark.parametrize("a_kind", ["array", "zero", "np_float", "row"])
@pytest.mark.parametrize("b_kind", ["array", "zero", "float"])
@pytest.mark.parametrize("shared", [False, True])
def test_where_one_side_and_zero_selects_match_np_where(cond_kind, a_kind, b_kind, shared):
    """A condition that picks one side everywhere (a mask that holds everywhere or nowhere, or
    one boolean against long arrays) and a select against +0.0 give np.where's bits, dtype and
    shape; the result is a new array unless the caller shares sides (compute.share_sides),
    and then, where it picked an array everywhere, that array."""
    rng = np.random.default_rng(11)
    n = 3 * arrays._BIT_SELECT_MIN
    cond = {"all": np.ones((2, n), bool), "none": np.zeros((2, n), bool), "true": True,
            "false": False, "np_true": np.True_, "mixed": rng.random((2, n)) > 0.5}[cond_kind]
    values = {"array": lambda: rng.choice(_SPECIAL, (2, n)), "zero": lambda: 0.0,
              "np_float": lambda: np.float64(-0.0), "row": lambda: rng.choice(_SPECIAL, n),
              "float": lambda: np.nan}
    a, b = values[a_kind](), values[b_kind]()
    with _sides_shared(shared):
        got = compute.where(cond, a, b)
    want = np.where(cond, a, b)
    assert np.asarray(got).dtype == want.dtype and np.shape(got) == want.shape
    assert np.asarray(got).tobytes() == want.tobytes()
    for side in (a, b):
        if isinstance(side, np.ndarray) and got is side:
            assert shared and side.shape == want.shape


def test_selects_on_one_condition_in_a_row_match_np_where():
    """Selects on one mask in a row with shared sides (the engine's memory terms; the mask's
    bits are built once) give np.where's bits for each pair of sides, and a new mask after
    them is not mistaken for the old one."""
    rng = np.random.default_rng(5)
    n = 3 * arrays._BIT_SELECT_MIN
    cond, other = rng.random(n) > 0.5, rng.random(n) > 0.5
    sides = [(rng.choice(_SPECIAL, n), rng.choice(_SPECIAL, n)), (rng.choice(_SPECIAL, n), 0.0),
             (rng.random(n), np.nan)]
    with _sides_shared(True):
        got = [compute.where(c, a, b) for c in (cond, other) for a, b in sides]
    want = [np.where(c, a, b) for c in (cond, other) for a, b in sides]
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]



def test_selects_on_conditions_tested_anew_match_np_where():
    """Conditions with the same entries as an earlier one (new arrays: a stage tests it again;
    their mask is kept) and conditions that share its probe entries but differ elsewhere
    give np.where's bits, selects interleaved, past the number of masks kept."""
    rng = np.random.default_rng(8)
    n = 4 * arrays._BIT_SELECT_MIN + 5  # entries past the last whole 8 (compared one by one)
    codes = rng.integers(0, 3, n).astype(float)
    conds = [codes == c for c in (0.0, 2.0)] * 2
    tail = conds[0].copy()
    tail[n - 2] = not tail[n - 2]
    conds.append(tail)
    for i in range(arrays._MASKS_KEPT + 2):  # the first's probes, one other entry apart
        near = conds[0].copy()
        near[1 + i] = not near[1 + i]
        conds.append(near)
    conds += [codes == 0.0, codes == 2.0]
    sides = [(rng.choice(_SPECIAL, n), 10.0 + rng.random(n)) for _ in conds]  # a ≠ b
    with _sides_shared(True):
        got = [compute.where(c, a, b) for c, (a, b) in zip(conds, sides)]
    want = [np.where(c, a, b) for c, (a, b) in zip(conds, sides)]
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]

@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("n", [100, 3 * arrays._FILLED_MIN])
def test_maximum_and_minimum_of_an_array_and_a_number_match_numpy(shared, n):
    """compute.maximum/minimum of a long array and a number (compared as two arrays, the
    number's array kept while sides are shared) give numpy's bits, dtype and shape for every
    special value on either side, twice in a row (-0.0 is not 0.0; a NaN keeps its bits)."""
    rng = np.random.default_rng(13)
    payload_nan = np.array([0x7FF8000000000123], dtype=np.int64).view(np.float64)[0]
    a = rng.choice(np.append(_SPECIAL, payload_nan), n)
    with _sides_shared(shared):
        for number in (*_SPECIAL.tolist(), payload_nan, np.float64(-0.0)):
            for ours, theirs in ((compute.maximum, np.maximum), (compute.minimum, np.minimum)):
                for x, y in ((a, number), (number, a), (a, number)):
                    got, want = ours(x, y), theirs(x, y)
                    assert got.dtype == want.dtype and got.shape == want.shape
                    assert got.tobytes() == want.tobytes()


def test_where_keeps_short_and_non_float_selects_to_numpy():
    """Masks shorter than the threshold, integer operands and non-boolean conditions go to
    np.where unchanged (integer results stay integers)."""
    cond = np.arange(2 * arrays._BIT_SELECT_MIN) % 3 == 0
    assert compute.where(cond, 1, 2).dtype == np.where(cond, 1, 2).dtype
    assert compute.where(cond[:4], 1.0, 2.0).tolist() == [1.0, 2.0, 2.0, 1.0]
    flags = cond.astype(float)
    assert compute.where(flags, 1.0, 2.0).tobytes() == np.where(flags, 1.0, 2.0).tobytes()


@pytest.mark.parametrize("shared", [False, True])
def test_where_of_one_side_given_twice_matches_np_where(shared):
    """A select whose two sides are one float array or number gives np.where's bits, dtype and
    shape on a mixed mask, and a new array unless the caller shares sides."""
    rng = np.random.default_rng(13)
    n = 3 * arrays._BIT_SELECT_MIN
    cond = rng.random((2, n)) > 0.5
    for side in (rng.choice(_SPECIAL, (2, n)), rng.choice(_SPECIAL, n), -0.0, np.nan):
        with _sides_shared(shared):
            got = compute.where(cond, side, side)
        want = np.where(cond, side, side)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()
        if got is side:
            assert shared


def test_any_and_all_of_long_float_arrays_count_as_numpy():
    """any_of/all_of of a long float array: NaN counts as non-zero, -0.0 as zero, as
    np.count_nonzero has them."""
    n = 3 * arrays._BIT_SELECT_MIN
    for fill, odd in ((0.0, -0.0), (0.0, np.nan), (-0.0, 2.0), (1.0, 0.0), (np.nan, -0.0),
                      (np.inf, np.nan)):
        x = np.full(n, fill)
        for column in (x, np.where(np.arange(n) == n // 3, odd, x)):
            assert compute.any_of(column) == bool(np.count_nonzero(column))
            assert compute.all_of(column) == (np.count_nonzero(column) == n)
