"""The TPU serving engine's overlay: ``tpu-v6e-vllm``, the collectives vLLM TPU's jitted step runs, measured.

``python -m calibration.tpu_engine_overlays --write hardware_specs/tpu`` fits the ICI link's bandwidth
efficiency and per-collective latency (``calibration.fit``, the achievable overlays' fitter) to published
microbenchmarks of XLA all-reduces on TPU v6e (``XLA_ALL_REDUCE_V6E``) and writes them as
``tpu-v6e-vllm.yaml``, which extends the device's achievable overlay (its fitted MXU efficiency stays)
and is named in every output, as the GPU engines' overlays are (``calibration.engine_overlays``).

Why the engine's collectives are their own evidence: vLLM TPU (tpu-inference) runs a model as one
jitted JAX program whose weights are sharded over the mesh's ``model`` axis, so XLA inserts a TP
all-reduce after each row-parallel projection (two a layer: 160 a step for an 80-layer model) and runs
them inside the program, in series with the layer's matmuls (``ENGINE_COLLECTIVES_SOURCE``). The
microbenchmark times the same thing: ``psum`` over a mesh axis inside one jitted program, 32 chained
in a loop and divided, which amortises the host dispatch away. The datasheet link (100 GB/s a link a
direction, 1 us a hop) prices a 1 MiB 8-chip all-reduce at 17 us; XLA takes 43.5 us (a fixed ~21 us
and ~74% of the bandwidth). Only microbenchmarks are used; application rows fit nothing.

The engine's host work is not in here: vLLM TPU v0.12.0 schedules one step ahead of the device
(``--async-scheduling``: ``tpu_runner.py`` copies the sampled tokens to the host asynchronously and
fills placeholders), and no public profile of its host time per step was found, so none is charged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from calibration.fit import FitResult

ENGINE = "vllm"
DEVICE = "tpu-v6e"
BASE = "tpu-v6e-achievable"  # the device's achievable overlay (fitted MXU efficiency) stays under the engine's

XLA_ALL_REDUCE_SOURCE = {
    "url": ("https://github.com/areporeporepo/tpu-irregular-memory-study/blob/"
            "20d26d70722a145bdbc8e76022f0a11d0f6a197c/data/fabric_results_32chip_final.json"),
    "kind": "measured",
    "note": ("XLA all-reduce on TPU v6e ('TPU v6 lite', JAX 0.10.2, a 32-chip slice of 8 hosts): jax.lax.psum of an "
             "f32 array over a one-axis mesh of the first 8, 16 and 32 devices, 0.25-16 MiB a chip; 32 psums chained "
             "in one jitted shard_map and the median of 20 calls divided by 32 (the record's 'ms': the host dispatch, "
             "0.5-1.2 ms a call, amortised away; 'ms_with_dispatch' keeps it), script experiment2_fabric_collectives.py "
             "at 522dfc2e5b19f8c146397e7425e7a974cfe9eee2 in the same repository. A student study, not a vendor table; "
             "the only per-size TPU all-reduce table with printed numbers found "
             "(calibration/data/published/TPU_SEARCH.md)"),
}

# (chips, bytes a chip, seconds an all-reduce): every all_reduce record of XLA_ALL_REDUCE_SOURCE, as printed
# ('per_chip_mib' x 2^20 bytes, 'ms' / 1e3).
XLA_ALL_REDUCE_V6E: tuple[tuple[int, int, float], ...] = (
    (8, 262144, 30.5e-6), (8, 1048576, 43.5e-6), (8, 4194304, 72.7e-6), (8, 16777216, 222.6e-6),
    (16, 262144, 41.9e-6), (16, 1048576, 45.4e-6), (16, 4194304, 78.1e-6), (16, 16777216, 240.4e-6),
    (32, 262144, 41.2e-6), (32, 1048576, 55.2e-6), (32, 4194304, 110.3e-6), (32, 16777216, 312.8e-6),
)

ENGINE_COLLECTIVES_SOURCE = {
    "url": ("https://github.com/vllm-project/tpu-inference/blob/bcb35b7dc63357c89e0cfc3842c09c31f589929b/"
            "tpu_inference/models/jax/llama3.py"),
    "kind": "vendor-code",
    "note": ("vLLM TPU (tpu-inference v0.12.0, the vllm/vllm-tpu:v0.12.0 image): Llama's o_proj and down_proj weights "
             "are sharded on their contracting axis over the mesh ('model' axis; nnx.with_partitioning at lines 55 and "
             "119, ShardingAxisName.MLP_TENSOR / ATTN_HEAD; MODEL_IMPL_TYPE defaults to flax_nnx, tpu_inference/envs.py "
             "line 19), so XLA's partitioner inserts an all-reduce after each, two a "
             "layer, inside the one jitted step program (tpu_inference/runner/tpu_runner.py: model_fn); they run as "
             "XLA collectives over ICI, the operation XLA_ALL_REDUCE_SOURCE times"),
}


@dataclass(frozen=True, kw_only=True)
class TpuEngineFit:
    result: FitResult
    records: list

    @property
    def name(self) -> str:
        return f"{DEVICE}-{ENGINE}"


def all_reduce_records(hardware) -> list:
    """The published all-reduces as measurement records on ``hardware`` (``calibration.achievable``'s rows)."""
    from calibration.achievable import _collective

    return [_collective({"collective": "all_reduce", "gpus": chips, "message_bytes": size, "time_s": seconds,
                         "tool": "jax.lax.psum (loop slope, 32 chained)", "version": "jax 0.10.2",
                         "url": XLA_ALL_REDUCE_SOURCE["url"], "line": line}, DEVICE, hardware)
            for line, (chips, size, seconds) in enumerate(XLA_ALL_REDUCE_V6E, start=1)]


def fit_engine_collectives() -> TpuEngineFit:
    """The ICI link's efficiency and per-collective latency fitted to ``XLA_ALL_REDUCE_V6E`` (device time:
    the rows have the dispatch amortised away)."""
    from calibration.achievable import device_time_hardware
    from calibration.fit import fit
    from perfmodel.hardware.loader import load_hardware

    hardware = device_time_hardware(load_hardware(BASE))
    records = all_reduce_records(hardware)
    return TpuEngineFit(result=fit(records, hardware, mode="graph", folds=0, extra_seeds=0), records=records)


def overlay_text(fitted: TpuEngineFit) -> str:
    from calibration.report import fitted_spec_yaml
    from perfmodel.hardware.loader import load_hardware

    spec = load_hardware(BASE)
    result = fitted.result
    datasheet = load_hardware(DEVICE)
    note = (f"fitted by perfmodel (calibration.tpu_engine_overlays) on {len(fitted.records)} XLA all-reduces on TPU v6e "
            f"(8, 16 and 32 chips, 0.25-16 MiB a chip): the ICI link's efficiency and per-collective latency; held-out "
            f"median |error| {100 * (result.heldout_median_abs_error or 0):.1f}%; everything else is {BASE}'s")
    provenance = {"url": XLA_ALL_REDUCE_SOURCE["url"], "kind": "measured", "note": note}
    description = f"{datasheet.description} (vllm on TPU: XLA collectives, {len(fitted.records)} measurements)"
    return fitted_spec_yaml(result, spec, BASE, Path(XLA_ALL_REDUCE_SOURCE["url"]), Path(f"{fitted.name}.yaml"),
                            fitted.records, name=fitted.name, kind="achievable", provenance=provenance,
                            description=description,
                            overrides={"sources": {"xla-all-reduce": XLA_ALL_REDUCE_SOURCE,
                                                   "engine-collectives": ENGINE_COLLECTIVES_SOURCE}})


def main(argv=None) -> int:
    """``python -m calibration.tpu_engine_overlays [--write DIR]``."""
    import argparse

    from perfmodel.hardware.loader import load_hardware
    from perfmodel.yaml_source import write_text_atomically

    parser = argparse.ArgumentParser(prog="python -m calibration.tpu_engine_overlays", description=main.__doc__)
    parser.add_argument("--write", type=Path, help="directory for tpu-v6e-vllm.yaml")
    args = parser.parse_args(argv)
    fitted = fit_engine_collectives()
    for name, (value, error) in fitted.result.params.items():
        print(f"{name}: {value:.6g} +- {error:.2g}")
    if args.write:
        output = args.write / f"{fitted.name}.yaml"
        write_text_atomically(output, overlay_text(fitted))
        load_hardware(output)  # the overlay must load like any spec
        print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
