"""Capture cost of a Llama-2-7B-sized model built from a transformers config on the meta device.

Run:  python benchmarks/capture_speed.py [--json benchmarks/results/capture_speed.json]
Prints wall time, peak resident memory growth and op counts, and writes JSON. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
from pathlib import Path

import torch
import transformers

from perfmodel.workload.capture import capture, matmul_class_flops

LLAMA2_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/capture_speed.json"))
    parser.add_argument("--tokens", type=int, default=512)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA2_7B)).eval()
    built_s = time.perf_counter() - start
    rss_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    result = capture(model, input_shapes=[(1, args.tokens)], input_dtypes=[torch.int64],
                     forward_kwargs={"use_cache": False}, name="llama-2-7b")
    capture_s = time.perf_counter() - start
    rss_after_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    row = {"model": "Llama-2-7B config (meta device)", "tokens": args.tokens, "build_s": built_s,
           "capture_s": capture_s, "ops": len(result.graph.ops), "free_views": result.free_ops,
           "edges": len(result.graph.edges), "matmul_class_flops": matmul_class_flops(result.graph),
           "peak_rss_growth_bytes": (rss_after_kib - rss_before_kib) * 1024,
           "peak_rss_bytes": rss_after_kib * 1024, "torch": torch.__version__,
           "transformers": transformers.__version__, "python": platform.python_version()}
    print(f"{'quantity':<34} {'value':>14}")
    print(f"{'build on meta device':<34} {built_s:>12.2f} s")
    print(f"{'capture (one forward, fake tensors)':<34} {capture_s:>12.2f} s")
    print(f"{'ops / free views / edges':<34} {row['ops']:>5} / {row['free_views']} / {row['edges']}")
    print(f"{'matmul-class FLOPs':<34} {row['matmul_class_flops'] / 1e12:>10.2f} TFLOP")
    print(f"{'peak RSS growth during capture':<34} {row['peak_rss_growth_bytes'] / 2**20:>10.0f} MiB")
    print(f"{'peak RSS of the process':<34} {row['peak_rss_bytes'] / 2**20:>10.0f} MiB")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(row, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
