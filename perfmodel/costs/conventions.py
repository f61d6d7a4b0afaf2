"""FLOP-counting conventions, as named constants (documented, not magic numbers).

* A fused multiply-add counts as 2 FLOPs (``FLOPS_PER_FMA``), as in every vendor peak and in
  ``torch.utils.flop_counter``: a matmul of (m x k) by (k x n) is 2*m*n*k FLOPs.
* Element-wise ops count ``attrs['flops_per_element']`` FLOPs per output element (default 1; the
  capture sets ``perfmodel.workload.capture.FLOPS_PER_ELEMENT_BY_OP`` for transcendental functions
  such as exp, tanh and gelu).
* softmax counts 5 per element (max, subtract, exp, sum, divide); layer norm 8 (mean, subtract,
  square, variance sum, rsqrt-scale, multiply, scale, shift); RMS norm 5; a reduction 1 per input
  element. These follow common analytical models (e.g. LLM-Viewer, the scaling book) and are
  cross-checked where torch's flop counter counts the op at all (it counts only matmul-like ops).
* Attention (QK^T and PV) is 4*b*h*s_q*s_kv*d FLOPs, halved for causal masks (useful work); a
  flash-style kernel executes (n+1)/(2n) of it for n blocks of ``FLASH_ATTENTION_BLOCK`` rows, as it
  skips only whole masked tiles; the softmax inside adds 5 per score.
"""

FLOPS_PER_FMA = 2
FLOPS_PER_ELEMENTWISE = 1
FLOPS_PER_SOFTMAX_ELEMENT = 5
FLOPS_PER_LAYERNORM_ELEMENT = 8
FLOPS_PER_RMSNORM_ELEMENT = 5
FLOPS_PER_REDUCED_ELEMENT = 1
ATTENTION_MATMULS = 2  # QK^T and PV
CAUSAL_FRACTION = 0.5
# Flash-style kernels skip fully masked (block x block) tiles: with n blocks along the sequence they
# compute n(n+1)/2 of n^2 tiles, i.e. (n+1)/(2n) of the work; 128 is FlashAttention-2's block size
# (a documented convention for every device).
FLASH_ATTENTION_BLOCK = 128
# A tiled matmul keeps a b x b output block resident and streams one column of A and one row of B
# past it (b*b + 2*b <= S): the block takes essentially all of the inner memory, b = sqrt(S), which
# gives the textbook Q = 2*m*n*k/sqrt(S) (Hong & Kung 1981; Demmel's CS267 notes on blocked matmul).
OUTPUT_BLOCK_SHARE = 1.0
# Flash attention keeps a Q block, its output accumulator and K/V blocks on chip: 4 tiles of head_dim.
FLASH_TILES_ON_CHIP = 4
