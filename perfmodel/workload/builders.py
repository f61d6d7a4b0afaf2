"""Builders of common workload graphs (pure core): GEMMs, element-wise chains, attention, a
transformer block (prefill or decode) and a small CNN.

Dimensions may be numpy integer arrays: the result is then a sweep over those scenarios.
"""

from __future__ import annotations

from typing import Callable, Iterable

from perfmodel.workload.ir import Dimension, Graph, Op, TensorRole, TensorSpec
from perfmodel.workload.op_kinds import activation_flops_per_element


def _t(shape: Iterable[Dimension], dtype: str, role: TensorRole = "activation") -> TensorSpec:
    return TensorSpec(shape=tuple(shape), dtype=dtype, role=role)


def linear(name: str, tokens: Dimension, in_features: Dimension, out_features: Dimension, dtype: str,
           weight_dtype: str | None = None) -> Op:
    """``y = x W^T`` as a matmul with m = tokens, k = in_features, n = out_features."""
    return Op(name=name, kind="matmul", provenance="aten.mm",
              inputs=(_t((tokens, in_features), dtype), _t((in_features, out_features), weight_dtype or dtype, "weight")),
              outputs=(_t((tokens, out_features), dtype),),
              attrs={"m": tokens, "n": out_features, "k": in_features, "dtype": dtype})


def gemm_sweep(sizes: Iterable[int] = (256, 1024, 4096, 8192), dtype: str = "bf16") -> Graph:
    ops = [Op(name=f"gemm_{size}", kind="matmul", provenance="aten.mm",
              inputs=(_t((size, size), dtype), _t((size, size), dtype, "weight")), outputs=(_t((size, size), dtype),),
              attrs={"m": size, "n": size, "k": size}) for size in sizes]
    return Graph(name="gemm_sweep", ops=ops)


def elementwise_chain(elements: int = 1 << 20, length: int = 8, dtype: str = "bf16") -> Graph:
    ops = [Op(name=f"chain.op{i}", kind="elementwise", provenance="aten.add" if i % 2 else "aten.mul",
              inputs=(_t((elements,), dtype),), outputs=(_t((elements,), dtype),)) for i in range(length)]
    edges = [(f"chain.op{i}", f"chain.op{i + 1}") for i in range(length - 1)]
    return Graph(name=f"elementwise_chain_{length}", ops=ops, edges=edges)


def attention(batch: Dimension = 1, heads: Dimension = 32, seq: Dimension = 2048, head_dim: Dimension = 128,
              causal: bool = True, implementation: str = "flash", dtype: str = "bf16",
              kv_heads: Dimension | None = None) -> Graph:
    kv_heads = heads if kv_heads is None else kv_heads
    op = Op(name="attn.sdpa", kind="attention", provenance="aten._scaled_dot_product_flash_attention",
            inputs=(_t((batch, heads, seq, head_dim), dtype), _t((batch, kv_heads, seq, head_dim), dtype),
                    _t((batch, kv_heads, seq, head_dim), dtype)),
            outputs=(_t((batch, heads, seq, head_dim), dtype),),
            attrs={"batch": batch, "heads": heads, "kv_heads": kv_heads, "seq_q": seq, "seq_kv": seq,
                   "head_dim": head_dim, "causal": causal, "implementation": implementation})
    return Graph(name=f"attention_{implementation}", ops=[op])


def transformer_block(batch: Dimension = 1, seq: Dimension = 2048, hidden: Dimension = 4096, heads: Dimension = 32,
                      kv_heads: Dimension | None = None, ffn: Dimension = 11008, dtype: str = "bf16",
                      kv_len: Dimension | None = None, layers: int = 1, weight_dtype: str | None = None,
                      name: str = "transformer_block") -> Graph:
    """A Llama-style pre-norm block (RMS norm, GQA attention, SwiGLU MLP), repeated ``layers`` times
    through op counts. ``kv_len`` set: a decode step of ``seq`` new tokens attending to ``kv_len``."""
    kv_heads = heads if kv_heads is None else kv_heads
    head_dim = hidden // heads
    tokens = batch * seq
    context = seq if kv_len is None else kv_len
    prefix = "layers"

    def act(*shape: Dimension) -> TensorSpec:
        return _t(shape, dtype)

    ops = [
        Op(name=f"{prefix}.input_norm", kind="norm", provenance="aten.rms_norm", inputs=(act(tokens, hidden),),
           outputs=(act(tokens, hidden),), attrs={"norm": "rms"}),
        linear(f"{prefix}.attn.q_proj", tokens, hidden, hidden, dtype, weight_dtype),
        linear(f"{prefix}.attn.k_proj", tokens, hidden, kv_heads * head_dim, dtype, weight_dtype),
        linear(f"{prefix}.attn.v_proj", tokens, hidden, kv_heads * head_dim, dtype, weight_dtype),
        Op(name=f"{prefix}.attn.rope", kind="elementwise", provenance="aten.mul", inputs=(act(tokens, hidden),),
           outputs=(act(tokens, hidden),), attrs={"flops_per_element": 3}),
        Op(name=f"{prefix}.attn.sdpa", kind="attention", provenance="aten._scaled_dot_product_flash_attention",
           inputs=(act(batch, heads, seq, head_dim), _t((batch, kv_heads, context, head_dim), dtype, "kv_cache"),
                   _t((batch, kv_heads, context, head_dim), dtype, "kv_cache")),
           outputs=(act(batch, heads, seq, head_dim),),
           attrs={"batch": batch, "heads": heads, "kv_heads": kv_heads, "seq_q": seq, "seq_kv": context,
                  "head_dim": head_dim, "causal": kv_len is None, "implementation": "flash"}),
        linear(f"{prefix}.attn.o_proj", tokens, hidden, hidden, dtype, weight_dtype),
        Op(name=f"{prefix}.attn.residual", kind="elementwise", provenance="aten.add",
           inputs=(act(tokens, hidden), act(tokens, hidden)), outputs=(act(tokens, hidden),)),
        Op(name=f"{prefix}.post_norm", kind="norm", provenance="aten.rms_norm", inputs=(act(tokens, hidden),),
           outputs=(act(tokens, hidden),), attrs={"norm": "rms"}),
        linear(f"{prefix}.mlp.gate_proj", tokens, hidden, ffn, dtype, weight_dtype),
        linear(f"{prefix}.mlp.up_proj", tokens, hidden, ffn, dtype, weight_dtype),
        Op(name=f"{prefix}.mlp.act", kind="elementwise", provenance="aten.silu", inputs=(act(tokens, ffn), act(tokens, ffn)),
           outputs=(act(tokens, ffn),), attrs={"flops_per_element": activation_flops_per_element("silu", gated=True)}),
        linear(f"{prefix}.mlp.down_proj", tokens, ffn, hidden, dtype, weight_dtype),
        Op(name=f"{prefix}.mlp.residual", kind="elementwise", provenance="aten.add",
           inputs=(act(tokens, hidden), act(tokens, hidden)), outputs=(act(tokens, hidden),)),
    ]
    ops = [Op(name=op.name, kind=op.kind, inputs=op.inputs, outputs=op.outputs, attrs=op.attrs, count=layers,
              provenance=op.provenance) for op in ops]
    names = [op.name for op in ops]
    edges = [(names[0], names[1]), (names[0], names[2]), (names[0], names[3]), (names[1], names[4]),
             (names[4], names[5]), (names[2], names[5]), (names[3], names[5]), (names[5], names[6]),
             (names[6], names[7]), (names[7], names[8]), (names[8], names[9]), (names[8], names[10]),
             (names[9], names[11]), (names[10], names[11]), (names[11], names[12]), (names[12], names[13])]
    return Graph(name=name, ops=ops, edges=edges)


def small_cnn(batch: int = 8, dtype: str = "bf16") -> Graph:
    """Two 3x3 convolutions with ReLU, global pooling and a classifier, on 32x32 RGB images."""
    def conv(name: str, cin: int, cout: int, size: int) -> Op:
        return Op(name=name, kind="conv", provenance="aten.convolution",
                  inputs=(_t((batch, cin, size, size), dtype), _t((cout, cin, 3, 3), dtype, "weight")),
                  outputs=(_t((batch, cout, size, size), dtype),),
                  attrs={"m": batch * size * size, "n": cout, "k": cin * 9})

    def relu(name: str, channels: int, size: int) -> Op:
        return Op(name=name, kind="elementwise", provenance="aten.relu",
                  inputs=(_t((batch, channels, size, size), dtype),), outputs=(_t((batch, channels, size, size), dtype),))

    ops = [conv("features.conv1", 3, 32, 32), relu("features.relu1", 32, 32), conv("features.conv2", 32, 64, 32),
           relu("features.relu2", 64, 32),
           Op(name="pool", kind="reduction", provenance="aten.mean", inputs=(_t((batch, 64, 32, 32), dtype),),
              outputs=(_t((batch, 64), dtype),)),
           linear("classifier", batch, 64, 10, dtype)]
    names = [op.name for op in ops]
    return Graph(name="small_cnn", ops=ops, edges=list(zip(names, names[1:], strict=False)))


SHIPPED: dict[str, Callable[[], Graph]] = {
    "gemm_sweep": gemm_sweep,
    "elementwise_chain": elementwise_chain,
    "attention_flash": lambda: attention(implementation="flash"),
    "attention_naive": lambda: attention(implementation="naive"),
    "transformer_block": transformer_block,
    "small_cnn": small_cnn,
}
