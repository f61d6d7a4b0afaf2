"""FLOP-counting conventions, as named constants (documented, not magic numbers).

* A fused multiply-add counts as 2 FLOPs (``units.FLOPS_PER_FMA``), as in every vendor peak and in
  ``torch.utils.flop_counter``: a matmul of (m x k) by (k x n) is 2*m*n*k FLOPs
  (``workload.op_kinds.matmul_flops``).
* Element-wise ops count ``attrs['flops_per_element']`` FLOPs per output element (default 1; every
  graph source sets ``perfmodel.workload.op_kinds.FLOPS_PER_ELEMENT_BY_FUNCTION`` for transcendental
  functions such as exp, tanh, silu and gelu).
* softmax counts 5 per element (max, subtract, exp, sum, divide); layer norm 8 (mean, subtract,
  square, variance sum, rsqrt-scale, multiply, scale, shift); RMS norm 5; a reduction 1 per input
  element. These follow common analytical models (e.g. LLM-Viewer, the scaling book) and are
  cross-checked where torch's flop counter counts the op at all (it counts only matmul-like ops).
* Attention (QK^T and PV) is 4*d FLOPs per scored (query, key) pair and the softmax 5 per score:
  b*h*s_q*s_kv pairs without a mask, s(s+1)/2 per head for a causal square, fewer under a sliding
  window (``costs.traffic.attended_pairs``); a flash-style kernel skips only whole masked blocks of
  ``FLASH_ATTENTION_BLOCK`` keys, so it executes on average half a block more per query row
  (for a causal square of n blocks, (n+1)/(2n) of the full work).
* Weight-only quantization (int8/int4 weights, float activations) dequantizes every weight inside
  the matmul kernel on the vector engine: ``DEQUANTIZE_FLOPS_PER_WEIGHT`` FLOP-equivalents per weight
  element, counted in issue slots of the fp32 rate (whose peak counts an FMA as 2 FLOPs): int8 =
  convert + scale (2 instructions, 4 FLOP-equivalents), int4 = unpack (shift, mask) + convert +
  scale (4 instructions, 8), as in gpt-fast's ``WeightOnlyInt8Linear`` (``linear(x, w.to(dtype)) *
  scales``) and its int4 path. Conversions issue at the full rate here; on NVIDIA GPUs they run at
  a quarter of it (CUDA C++ Programming Guide, arithmetic instruction throughput), so this is an
  optimistic floor unless a kernel avoids them (the lop3 "magic number" int4 conversion).
* Block-scaled weights (``dtypes``: fp8_block, mxfp8, mxfp4, nvfp4) under 16-bit or wider float
  activations are weight-only kernels too (gpt-oss's MXFP4 experts on Hopper, which has no FP4 MMA:
  Triton's ``matmul_ogs`` upcasts them to bf16 in registers; Marlin-style W4A16 NVFP4 kernels): each
  element is converted and multiplied by its block's scale, 8-bit elements as int8 (4), 4-bit ones
  as int4 (unpack, convert, scale: 8). Under activations of their own element width the matrix
  engine consumes them natively at the activations' rate where it has block-scaled MMA (Blackwell's,
  PTX ``tcgen05.mma`` ``kind::mxf8f6f4`` / ``kind::mxf4nvf4``, applies MX and NVFP4 scales inside the
  instruction; ``rules.has_block_scaled_mma``: a matrix engine that runs fp4): no per-element work.
  Without it (Hopper, Ada, MI300X), fp4 elements under fp8 activations have no MMA of their own and are
  converted element by element as under bf16 (8), and mxfp8's fp8 elements run on the fp8 MMA with
  their per-32 scales applied to the fp32 partial sums every 32 of k (``BLOCK_SCALE_FLOPS_PER_PROMOTION``
  each, as fp8_block's every 128 below). fp8_block's scales are
  not in the instruction on Hopper: every ``FP8_BLOCK_PROMOTION_K`` = 128 elements of k the partial
  sums are moved to fp32 registers and multiplied by the two blocks' scales on the CUDA cores
  (DeepSeek-V3, arXiv 2412.19437, section 3.3.2 "Increasing Accumulation Precision", N_C = 128): one
  FMA (2 FLOP-equivalents) per output element per 128 of k, ``BLOCK_SCALE_FLOPS_PER_PROMOTION``. Such a
  product is its own kernel class (``rules.BLOCK_FP8_MATMUL``): the engines' block-scaled kernels have their
  own fixed cost and rate, fitted per engine, which a parameter set without the class takes from fp8's.
  Its activations' scales (one fp32 per 1 x 128 group: 4/128 byte an element, +3.1% of the fp8 activation
  bytes) are not counted: the activations are plain ``fp8`` tensors in the graphs, a large-m product (where the
  activations' bytes weigh) is compute-bound, and the share is under the class's fitted rate's standard error
  (7-8% on H100).
"""

from perfmodel.units import FLOPS_PER_FMA  # noqa: F401  (one definition, re-exported for the rules)

FLOPS_PER_ELEMENTWISE = 1
FLOPS_PER_SOFTMAX_ELEMENT = 5
FLOPS_PER_LAYERNORM_ELEMENT = 8
FLOPS_PER_RMSNORM_ELEMENT = 5
FLOPS_PER_REDUCED_ELEMENT = 1
# The attention gradient (FlashAttention-2, arXiv 2307.08691, Algorithm 2): four gradient matmuls (dV,
# dP, dQ, dK: twice the forward's, the model-FLOPs convention of MFU, where the backward is twice the
# forward), a fifth recomputing the scores (executed 2.5x, which torch.utils.flop_counter counts
# too), and Q, K, V, O, dO read with dQ, dK, dV written (twice the forward's traffic).
ATTENTION_BACKWARD_USEFUL = 2.0
ATTENTION_BACKWARD_EXECUTED = 2.5
ATTENTION_BACKWARD_TRAFFIC = 2.0
# A backward split into two kernels, one for dK and dV and one for dQ, each recomputing the scores S = QK^T and
# dP = dO V^T: seven matmuls against the forward's two (JAX's Pallas TPU flash attention,
# ``_flash_attention_bwd_dkv`` (S, dV, dP, dK) and ``_flash_attention_bwd_dq`` (S, dP, dQ); splash attention
# without ``use_fused_bwd_kernel``, MaxText's default ``sa_use_fused_bwd_kernel: false``). The two kernels read Q,
# K, V and dO each and write dK, dV and dQ: 11 tensors against the forward's 4.
ATTENTION_BACKWARD_EXECUTED_SPLIT = 3.5
ATTENTION_BACKWARD_TRAFFIC_SPLIT = 11 / 4
DEQUANTIZE_FLOPS_PER_WEIGHT = {"int8": 4, "uint8": 4, "int4": 8,
                               "fp8_block": 4, "mxfp8": 4, "mxfp4": 8, "nvfp4": 8}
# Block-scaled weights are dequantized inside the kernel only under activations at least this wide (bytes).
BLOCK_SCALED_WEIGHT_ONLY_ACTIVATION_BYTES = 2
FP8_BLOCK_PROMOTION_K = 128
BLOCK_SCALE_FLOPS_PER_PROMOTION = 2
# A decode kernel splits each sequence's keys over several blocks when its blocks alone fill less than this share
# of the engine's units (``costs.rules.decode_splits_keys``): FlashAttention's num_splits_heuristic,
# https://github.com/Dao-AILab/flash-attention/blob/main/csrc/flash_attn/flash_api.cpp ("If we have enough to
# almost fill the SMs, then just use 1 split": batch_nheads_mblocks >= 0.8f * num_SMs); vendor code.
SPLIT_KEYS_FILL = 0.8
# Flash-style kernels skip fully masked (block x block) tiles: with n blocks along the sequence they
# compute n(n+1)/2 of n^2 tiles, i.e. (n+1)/(2n) of the work; 128 is FlashAttention-2's block size,
# the default for an engine whose spec gives no ``attention_kv_block`` (PyTorch's CPU kernel: 512).
FLASH_ATTENTION_BLOCK = 128
# The query rows one thread block of a flash-style kernel owns (its Q tile): 128 in FlashAttention-2's and
# FlashAttention-3's forward kernels for the head dimensions served here (kBlockM = 128; arXiv 2307.08691
# section 3.1 and https://github.com/Dao-AILab/flash-attention/blob/main/hopper/tile_size.h, source kind:
# vendor-code). Each tile pays a fixed prologue and epilogue (load its queries, rescale and write its
# output) beside its main loop: ``costs.rules.attention_work_units``.
FLASH_ATTENTION_QUERY_BLOCK = 128
# A flash kernel's online softmax evaluates one exponential per score element it computes (exp2 of the scaled
# score less the row's running maximum), on the SMs' special-function units (MUFU.EX2), not on the tensor cores:
# 16 results per clock per SM on NVIDIA GPUs of compute capability 8.x-10.x (CUDA C++ Programming Guide, "Arithmetic
# Instructions" throughput table, the 32-bit exp2/log2/reciprocal/rsqrt/sin/cos row; source kind: datasheet). On an
# H100 SXM that is 132 x 16 x 1.83 GHz = 3.9 T/s beside 989 TFLOP/s of bf16 matmul, the figures FlashAttention-3
# (arXiv 2407.08608, section 3.1) gives: at head dim 128 a score's two matmuls take 512 FLOP, so its exponential
# takes half as long as its matmuls; the smaller the head dimension, the larger its share
# (``costs.rules.exponential_rate_per_s``). Blackwell Ultra (B300, GB300) doubles this rate for attention (NVIDIA's
# "Inside NVIDIA Blackwell Ultra" blog); its specs keep 16 until a spec field carries it.
SFU_EXPONENTIALS_PER_CLOCK = 16
# A tiled matmul keeps a b x b output block resident and streams one column of A and one row of B
# past it (b*b + 2*b <= S): the block takes essentially all of the inner memory, b = sqrt(S), which
# gives the textbook Q = 2*m*n*k/sqrt(S) (Hong & Kung 1981; Demmel's CS267 notes on blocked matmul).
OUTPUT_BLOCK_SHARE = 1.0
# Flash attention keeps a Q block, its output accumulator and K/V blocks on chip: 4 tiles of head_dim.
FLASH_TILES_ON_CHIP = 4
