"""Rebuild the published-microbenchmark CSVs of this folder from the source files they quote.

Run from anywhere with the source files checked out at the commits named in ``SOURCES``::

    python calibration/data/published/extract_sources.py SOURCES_DIR [OUT_DIR]

``SOURCES_DIR`` holds one folder per repository (``owner+name``) with the files at their repository
paths, e.g. ``SOURCES_DIR/openxla+xla/xla/service/gpu/model/matmul_interpolator_data.h``. Numbers are
copied, never computed from other measurements; the only arithmetic is exact unit scaling in
decimal (FLOP/s -> TFLOP/s, GB/s -> B/s, us -> s, KiB/MiB/GiB -> B) and the message size of an XLA
collective from its published shape (see README.md). The FlashAttention figure labels cannot be
parsed from the PNGs and are transcribed below by hand, label for label.
"""

from __future__ import annotations

import csv
import re
import sys
from decimal import Decimal
from pathlib import Path

XLA_MATMUL_COMMIT = "e97611c4c41c1f2dd331aca646792089f7f86b66"
XLA_COLLECTIVE_COMMIT = "efa7e21fadcd6cc0af014664607fd658c5ea51b7"
MLE_COMMIT = "744d01e18b79512572f64a6bbd8b5f4a725203a7"
GPU_BENCHES_COMMIT = "1c36d509ee717dca9215c27135fa1e611bb03ed1"
FLASH_ATTN_COMMIT = "0251105a2fb19d2957484b7f023cd8c115286ced"
DEEPGEMM_COMMIT = "327ec92f6977e7fee022cb76a8f273b75483c3d8"
TILELANG_COMMIT = "b2acfc3791d5ddeef3772214222461c85659c904"

SOURCES = {
    "xla_matmul": ("openxla+xla", "xla/service/gpu/model/matmul_interpolator_data.h", XLA_MATMUL_COMMIT),
    "xla_collective": ("openxla+xla", "xla/service/gpu/model/collective_interpolator_data.h", XLA_COLLECTIVE_COMMIT),
    "mle_accelerator": ("stas00+ml-engineering", "compute/accelerator/README.md", MLE_COMMIT),
    "mle_network": ("stas00+ml-engineering", "network/README.md", MLE_COMMIT),
    "stream_h200": ("te42kyfo+gpu-benches", "gpu-stream/h200.txt", GPU_BENCHES_COMMIT),
    "l2_a100": ("te42kyfo+gpu-benches", "gpu-l2-cache/a100_80.txt", GPU_BENCHES_COMMIT),
    "l2_h200": ("te42kyfo+gpu-benches", "gpu-l2-cache/h200.txt", GPU_BENCHES_COMMIT),
    "cache_a100": ("te42kyfo+gpu-benches", "gpu-cache/a100_80.txt", GPU_BENCHES_COMMIT),
    "deepgemm": ("deepseek-ai+DeepGEMM", "README.md", DEEPGEMM_COMMIT),
    "tilelang_fp8": ("tile-ai+tilelang", "benchmark/matmul_fp8/README.md", TILELANG_COMMIT),
}

MATMUL_COLUMNS = ["source", "device", "dtype", "batch", "m", "n", "k", "measured_tflops", "time_s", "url", "tool",
                  "version", "conditions", "kind"]
MEMORY_COLUMNS = ["source", "device", "level", "pattern", "bytes", "measured_bytes_per_s", "url", "tool", "version",
                  "conditions", "kind"]
COLLECTIVE_COLUMNS = ["source", "device", "collective", "gpus", "message_bytes", "dtype", "algorithm", "time_s",
                      "alg_bytes_per_s", "bus_bytes_per_s", "url", "tool", "version", "conditions", "kind"]
ATTENTION_COLUMNS = ["source", "device", "dtype", "batch", "heads", "seq_len", "head_dim", "causal", "window", "block",
                     "direction", "implementation", "measured_tflops", "time_s", "url", "tool", "version", "conditions",
                     "kind"]


def blob(key: str, anchor: str = "") -> str:
    repo, path, commit = SOURCES[key]
    return f"https://github.com/{repo.replace('+', '/')}/blob/{commit}/{path}{anchor}"


def scaled(text: str, factor: Decimal) -> str:
    """``text`` times ``factor`` in exact decimal, printed without an exponent."""
    value = (Decimal(text.replace(",", "").replace("_", "")) * factor).normalize()
    return format(value, "f")


TERA_INV = Decimal(1) / Decimal(10**12)
GIGA = Decimal(10**9)
MICRO = Decimal(1) / Decimal(10**6)
BINARY = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def binary_bytes(text: str) -> int:
    number, unit = re.fullmatch(r"\s*(\d+)\s*(KiB|MiB|GiB|B)\s*", text).groups()
    return int(number) * BINARY[unit]


# --------------------------------------------------------------------------------------------------
# protobuf text format (XLA perf tables)

_TOKEN = re.compile(r'\s*(?:(#[^\n]*)|([A-Za-z_][A-Za-z0-9_]*)|(\{)|(\})|(:)|("(?:[^"\\]|\\.)*")|([-+0-9.eE]+))')


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while text[pos:].strip():
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise ValueError(f"unparsable text proto at {pos}: {text[pos:pos + 40]!r}")
        pos = match.end()
        for group, kind in ((2, "id"), (3, "{"), (4, "}"), (5, ":"), (6, "str"), (7, "num")):
            if match.group(group) is not None:
                out.append((kind, match.group(group)))
                break
    return out


def parse_text_proto(text: str) -> list:
    tokens, index = _tokens(text), 0

    def block() -> list:
        nonlocal index
        items = []
        while index < len(tokens) and tokens[index][0] != "}":
            name = tokens[index][1]
            index += 1
            if tokens[index][0] == ":":
                index += 1
            if tokens[index][0] == "{":
                index += 1
                items.append((name, block()))
                index += 1
            else:
                kind, value = tokens[index]
                index += 1
                items.append((name, value[1:-1] if kind == "str" else value))
        return items

    return block()


def first(items: list, name: str):
    return next((value for key, value in items if key == name), None)


def every(items: list, name: str) -> list:
    return [value for key, value in items if key == name]


def embedded_table(text: str) -> list:
    return parse_text_proto(text[text.index('R"pb(') + 5:text.index(')pb"')])


# --------------------------------------------------------------------------------------------------
# matmul

XLA_DEVICES = {"sm_90": "h100-sxm", "sm_100_B200": "b200"}
XLA_DTYPES = {"bf16xbf16->bf16": "bf16", "f8e4m3fnxf8e4m3fn->bf16": "fp8", "f32xf32->f32": "tf32"}
SQUARE = {256, 512, 1024, 2048, 4096}


def keep_xla_matmul(device_key: str, dtype_key: str, b: int, m: int, n: int, k: int) -> bool:
    """The representative subset (README.md): the full b=1 grid in bf16 and fp8, squares otherwise."""
    if dtype_key == "f8e4m3fnxf8e4m3fn->bf16" and device_key == "sm_90":
        return False  # physically inconsistent series (README.md: skipped)
    square = m == n == k
    if dtype_key in ("bf16xbf16->bf16", "f8e4m3fnxf8e4m3fn->bf16") and b == 1:
        return True
    if dtype_key == "bf16xbf16->bf16":
        return square and b in (2, 4)
    if dtype_key == "f32xf32->f32":
        return square and b == 1
    return False


def xla_matmul_rows(root: Path) -> list[dict]:
    table = embedded_table(source_text(root, "xla_matmul"))
    rows = []
    for device in every(table, "entries"):
        device_key = first(device, "key")
        for entry in every(first(device, "value"), "entries"):
            b, m, n, k = (int(first(entry, name)) for name in "bmnk")
            for flops in every(entry, "flops"):
                dtype_key = first(flops, "key")
                if dtype_key not in XLA_DTYPES or not keep_xla_matmul(device_key, dtype_key, b, m, n, k):
                    continue
                conditions = (f"XLA table key {device_key}, dtype key {dtype_key}; published FLOP/s = 2*b*m*n*k / "
                              "median kernel time of 5 CUPTI-traced runs after 1 warm-up, inputs alternated "
                              "between two argument sets; default XLA GEMM autotuning")
                if dtype_key == "f32xf32->f32":
                    conditions += "; f32 dot at XLA default precision (TF32 tensor cores; above the FP32 vector peak)"
                if device_key == "sm_90":
                    conditions += "; 'sm_90' is H100 in XLA's commit messages, SKU not stated in the file"
                rows.append({"source": "xla-matmul-perf-table", "device": XLA_DEVICES[device_key],
                             "dtype": XLA_DTYPES[dtype_key], "batch": b, "m": m, "n": n, "k": k,
                             "measured_tflops": scaled(first(flops, "value"), TERA_INV), "time_s": "",
                             "url": blob("xla_matmul"), "tool": "xla/tools/matmul_perf_table_gen",
                             "version": XLA_MATMUL_COMMIT, "conditions": conditions, "kind": "measured"})
    rows.sort(key=lambda r: (r["device"], r["dtype"], r["batch"], r["m"], r["n"], r["k"]))
    return rows


MAMF_DEVICES = {"NVIDIA A100 SXM": "a100-sxm-80gb", "NVIDIA H100 SXM": "h100-sxm", "NVIDIA H200 SXM": "h200-sxm",
                "NVIDIA B200 SXM": "b200", "AMD MI300X": "mi300x"}
# Figures of this table that are validation rows (workloads/validation/published_measurements.csv, group F):
# calibration and validation data stay disjoint, so these are left out here.
MAMF_VALIDATION_ROWS = {("NVIDIA A100 SXM", "bf16"), ("NVIDIA H100 SXM", "bf16"), ("NVIDIA H100 SXM", "fp8"),
                        ("NVIDIA H200 SXM", "fp8")}


def mamf_rows(root: Path) -> list[dict]:
    text = source_text(root, "mle_accelerator")
    start = text.index("#### Maximum Achievable Matmul FLOPS comparison table")
    section = text[start:text.index("Caveat emptor", start)]
    rows = []
    for dtype, heading in (("bf16", "**BF16**"), ("fp8", "**FP8 (`float8_e4m3fn`)**")):
        block = section[section.index(heading):]
        block = block[:block.index("\n\n\n")] if "\n\n\n" in block else block
        for line in block.splitlines():
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if len(cells) < 7 or cells[0] not in MAMF_DEVICES or not cells[1]:
                continue
            if (cells[0], dtype) in MAMF_VALIDATION_ROWS:
                continue
            accelerator, mamf, theory, _efficiency, shape, torch_version, notes = cells[:7]
            m, n, k = (int(v) for v in shape.split("x"))
            conditions = (f"'{accelerator}' row; best shape (MxNxK) of a brute-force shape search; mean of 100 "
                          f"iterations after 50 warm-up; torch {torch_version}; theory {theory}")
            if notes:
                conditions += f"; notes: {notes}"
            rows.append({"source": "mamf", "device": MAMF_DEVICES[accelerator], "dtype": dtype, "batch": 1,
                         "m": m, "n": n, "k": k, "measured_tflops": mamf, "time_s": "",
                         "url": blob("mle_accelerator", "#maximum-achievable-matmul-flops-comparison-table"),
                         "tool": "ml-engineering mamf-finder.py (torch.mm)", "version": MLE_COMMIT,
                         "conditions": conditions, "kind": "measured"})
    return rows


# H800 SXM5 FP8 GEMM tables (README.md: the H800 stands in for the H100 SXM's tensor cores, not its HBM).
# A row is taken only where its product, as the fit models it (fp8 operands, bf16 output), is compute-bound
# on the h100-sxm datasheet roofline: FLOPs / (m*k + k*n + 2*m*n bytes per product) >= dense FP8 peak / HBM
# bandwidth (1978.9 TFLOP/s / 3.35 TB/s, hardware_specs/gpu/h100-sxm.yaml). HBM-bound rows would measure the
# H800's memory system, which this data set does not equate with the H100's (HBM rows stay per device).
H100_SXM_FP8_RIDGE = Decimal("1978.9e12") / Decimal("3.35e12")
H800_NOTE = ("H800 SXM5 mapped to h100-sxm: the same GH100 die with 132 SMs (DeepGEMM README) and the same "
             "tensor cores and FP8 peak; the H800 differs in NVLink (400 GB/s) and FP64, neither used by a "
             "single-GPU GEMM")


def compute_bound_on_h100(b: int, m: int, n: int, k: int) -> bool:
    return Decimal(2 * b * m * n * k) / Decimal(b * (m * k + k * n + 2 * m * n)) >= H100_SXM_FP8_RIDGE


def markdown_rows(block: str) -> list[list[str]]:
    """The body cells of the first markdown table in ``block`` (header and rule lines dropped)."""
    lines = [line.strip() for line in block.splitlines() if line.strip().startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


DEEPGEMM_TABLES = (("### Normal GEMMs for dense models", "normal GEMM (gemm_fp8_fp8_bf16_nt)"),
                   ("### Grouped GEMMs for MoE models (contiguous layout)",
                    "grouped GEMM, contiguous layout (m_grouped_gemm_fp8_fp8_bf16_nt_contiguous): batch = #groups"),
                   ("### Grouped GEMMs for MoE models (masked layout)",
                    "grouped GEMM, masked layout (m_grouped_gemm_fp8_fp8_bf16_nt_masked) timed with every group full "
                    "(masked_m = M per group): batch = #groups"))


def deepgemm_rows(root: Path) -> list[dict]:
    text = source_text(root, "deepgemm")
    rows = []
    for heading, what in DEEPGEMM_TABLES:
        block = text[text.index(heading) + len(heading):]
        block = block[:block.index("\n#")]
        for cells in markdown_rows(block):
            if len(cells) == 6:
                b, (m, n, k) = 1, (int(cell) for cell in cells[:3])
            else:
                b, m, n, k = (int(cell) for cell in cells[:4])
            tflops = re.fullmatch(r"(\d+) TFLOPS", cells[-3]).group(1)
            if not compute_bound_on_h100(b, m, n, k):
                continue
            conditions = (f"DeepGEMM README 'Performance' table, {what}; H800 SXM5, NVCC 12.8; FP8 e4m3 with "
                          "fine-grained scaling (LHS 1x128 per token and channel group, RHS 128x128 blocks, FP32 "
                          "scales, promotion to CUDA-core FP32 accumulators), BF16 output; tests/test_core.py: "
                          "bench_kineto mean kernel time of 30 runs in the torch profiler, an 8 GB memset flushing the "
                          f"L2 before each run; the table's memory bandwidth ({cells[-2]}) and speed-up ({cells[-1]}) "
                          f"over the authors' CUTLASS 3.6 kernel are not copied; {H800_NOTE}")
            rows.append({"source": "deepgemm-readme", "device": "h100-sxm", "dtype": "fp8", "batch": b, "m": m,
                         "n": n, "k": k, "measured_tflops": tflops, "time_s": "", "url": blob("deepgemm", "#performance"),
                         "tool": "DeepGEMM tests/test_core.py", "version": DEEPGEMM_COMMIT, "conditions": conditions,
                         "kind": "measured"})
    return rows


def tilelang_fp8_rows(root: Path) -> list[dict]:
    text = source_text(root, "tilelang_fp8")
    m, n = (int(value) for value in re.search(r"M = (\d+)\nN = (\d+)", text).groups())
    build = re.search(r"Repository commit: `([0-9a-f]{40})`", text).group(1)
    driver = re.search(r"on driver `([0-9.]+)`", text).group(1)
    rows = []
    for cells in markdown_rows(text[text.index("## Results"):]):
        k, _latency, tflops = int(cells[0]), cells[1], cells[2]
        if not compute_bound_on_h100(1, m, n, k):
            continue
        conditions = ("tilelang benchmark/matmul_fp8/benchmark_matmul.py README results; NVIDIA H800 SXM, driver "
                      f"{driver}, tilelang built at {build[:12]}; A[M,K] x B[N,K]^T, FP8 e4m3 operands without "
                      "scaling, FP32 accumulation, FP8 output (the fit's op writes BF16; the rows kept are compute-"
                      "bound on the datasheet roofline either way); the fastest config of the default autotuning "
                      "space, each config timed by one CUDA-event-timed run after one warm-up (Profiler.do_bench "
                      "defaults n_warmup=1, n_repeat=1) with a 256 MB L2 flush before it; the README's "
                      "'Latency (s)' column is in ms (2*M*N*K / latency matches the TFLOPs column only in ms), "
                      f"so only the TFLOPs column is copied; {H800_NOTE}")
        rows.append({"source": "tilelang-fp8-benchmark", "device": "h100-sxm", "dtype": "fp8", "batch": 1, "m": m,
                     "n": n, "k": k, "measured_tflops": tflops, "time_s": "", "url": blob("tilelang_fp8"),
                     "tool": "tilelang benchmark_matmul.py (autotuner, profiler do_bench)", "version": TILELANG_COMMIT,
                     "conditions": conditions, "kind": "measured"})
    return rows


# --------------------------------------------------------------------------------------------------
# memory bandwidth

STREAM_BUFFER_BYTES = (128 * 1024 * 1024 + 2) * 8  # gpu-stream/main.cu: max_buffer_size doubles per stream
STREAM_KERNELS = {"init": 1, "read": 1, "scale": 2, "triad": 3, "3pt": 2, "5pt": 2}  # streamCount per kernel
STREAM_PATTERNS = {"init": "init", "read": "read", "scale": "scale", "triad": "triad", "3pt": "stencil3pt",
                   "5pt": "stencil5pt"}
# Device spec and its L2 capacity as the hardware specs give it (a100-sxm-80gb: 40 MiB; h200-sxm: 50 MB).
GPU_BENCH_DEVICES = {"a100": ("a100-sxm-80gb", 40 * 2**20), "h200": ("h200-sxm", 50 * 10**6)}
L2_LABELS = {"a100": "40 MiB", "h200": "50 MB"}
GPU_BENCH_DEVICE_NOTES = {
    "a100": "file a100_80: A100 80GB, form factor not stated in the repository (mapped to the SXM spec)",
    "h200": "file h200: H200, form factor not stated in the repository (mapped to the SXM spec)",
}


def stream_rows(root: Path, key: str, device_tag: str) -> list[dict]:
    lines = source_text(root, key).splitlines()
    header = lines[0].split("|")[1].split()
    device, _ = GPU_BENCH_DEVICES[device_tag]
    rows = []
    for line in lines[1:]:
        left, right = line.split("|")
        block_size = int(left.split()[0])
        if block_size != 1024:
            continue
        values = right.replace("GB/s:", "").split()
        for kernel, value in zip(header, values, strict=True):
            rows.append({"source": "gpu-benches-stream", "device": device, "level": "hbm",
                         "pattern": STREAM_PATTERNS[kernel], "bytes": STREAM_KERNELS[kernel] * STREAM_BUFFER_BYTES,
                         "measured_bytes_per_s": scaled(value, GIGA), "url": blob(key), "tool": "gpu-benches gpu-stream",
                         "version": GPU_BENCHES_COMMIT,
                         "conditions": (f"{GPU_BENCH_DEVICE_NOTES[device_tag]}; row blockSize 1024 (2 blocks/SM, "
                                        f"100% occupancy); {STREAM_KERNELS[kernel]} stream(s) of (128Mi+2) doubles; "
                                        "median of 9 timed pairs of launches; fp64"),
                         "kind": "measured"})
    return rows


def l2_cache_rows(root: Path, key: str, device_tag: str) -> list[dict]:
    device, l2_bytes = GPU_BENCH_DEVICES[device_tag]
    rows = []
    for line in source_text(root, key).splitlines()[1:]:
        match = re.match(r"\s*(\d+) kB\s+(\d+) kB\s+\S+ms\s+\S+%\s+([\d.]+) GB/s", line)
        if not match:
            continue
        working_set = int(match.group(2)) * 1024
        if working_set <= l2_bytes:
            level = "l2"
        elif working_set >= 2 * l2_bytes:
            level = "hbm"
        else:
            continue  # between 1x and 2x the L2 capacity: a mix of levels (README.md)
        rows.append({"source": "gpu-benches-l2-cache", "device": device, "level": level, "pattern": "read",
                     "bytes": working_set, "measured_bytes_per_s": scaled(match.group(3), GIGA), "url": blob(key),
                     "tool": "gpu-benches gpu-l2-cache", "version": GPU_BENCHES_COMMIT,
                     "conditions": (f"{GPU_BENCH_DEVICE_NOTES[device_tag]}; 200000 blocks of 1024 threads each read "
                                    f"a {match.group(1)} kB chunk of the working set (fp64 loads); min of 11 runs; "
                                    f"level by working set vs the {L2_LABELS[device_tag]} L2 (<=1x l2, >=2x hbm)"),
                     "kind": "measured"})
    return rows


def cache_rows(root: Path, key: str, device_tag: str) -> list[dict]:
    device, _ = GPU_BENCH_DEVICES[device_tag]
    rows = []
    pattern = re.compile(r"\s*(\d+) kB\s+\S+ms\s+\S+%\s+([\d.]+) GB/s\s+(\d+) GB/s\s+(\d+) GB/s\s+(\d+) GB/s")
    for line in source_text(root, key).splitlines()[1:]:
        match = pattern.match(line)
        if not match:
            continue
        effective, dram_read, l2_read = Decimal(match.group(2)), Decimal(match.group(3)), Decimal(match.group(5))
        if l2_read <= effective / 100:
            level = "l1"
        elif l2_read >= effective * Decimal("0.95") and dram_read <= effective / 100:
            level = "l2"
        else:
            continue  # L1 and L2 both serve (README.md)
        rows.append({"source": "gpu-benches-cache", "device": device, "level": level, "pattern": "read",
                     "bytes": int(match.group(1)) * 1024, "measured_bytes_per_s": scaled(match.group(2), GIGA),
                     "url": blob(key), "tool": "gpu-benches gpu-cache", "version": GPU_BENCHES_COMMIT,
                     "conditions": (f"{GPU_BENCH_DEVICE_NOTES[device_tag]}; one 256-thread block per SM, every block "
                                    "re-reads the same buffer of this size (fp32 loads); aggregate over all SMs; "
                                    "min of 15 runs; level from the file's own L2/DRAM read counters "
                                    f"(L2 read {match.group(5)} GB/s, DRAM read {match.group(3)} GB/s)"),
                     "kind": "measured"})
    return rows


# --------------------------------------------------------------------------------------------------
# collectives

XLA_COLLECTIVES = {"all-reduce": "all_reduce", "all-gather": "all_gather", "reduce-scatter": "reduce_scatter",
                   "all-to-all": "all_to_all"}


def xla_collective_rows(root: Path) -> list[dict]:
    table = embedded_table(source_text(root, "xla_collective"))
    rows = []
    for device in every(table, "entries"):
        device_key = first(device, "key")
        if device_key not in XLA_DEVICES:
            continue
        for entry in every(first(device, "value"), "entries"):
            instruction = first(entry, "instruction")
            opcode = first(instruction, "opcode")
            if opcode not in XLA_COLLECTIVES:
                continue  # collective-permute: point-to-point pairs, not a collective of the schema
            shape = first(instruction, "shape")
            [elements] = [int(v) for v in every(shape, "dimensions")]
            assert first(shape, "element_type") == "F32"
            groups = first(instruction, "iota_collective_device_list")
            group_count = int(first(groups, "num_replica_groups"))
            per_group = int(first(groups, "num_devices_per_group"))
            # The generator's tensor_size_bytes: the full buffer (the output of reduce-scatter is 1/group of it).
            message = elements * 4 * (per_group if opcode == "reduce-scatter" else 1)
            conditions = (f"XLA table key {device_key}; HLO {opcode} of f32[{elements}] (the instruction's output "
                          f"shape); {group_count} replica group(s) of {per_group} over 8 GPUs, run concurrently; "
                          "published network_throughput_bytes_per_sec = tensor_size_bytes / median wall time of 20 "
                          "executions (algorithm bandwidth)")
            conditions += "; GPU SKU, node and interconnect not stated in the file"
            rows.append({"source": "xla-collective-perf-table", "device": XLA_DEVICES[device_key],
                         "collective": XLA_COLLECTIVES[opcode], "gpus": per_group, "message_bytes": message,
                         "dtype": "fp32", "algorithm": "", "time_s": "",
                         "alg_bytes_per_s": first(entry, "network_throughput_bytes_per_sec"), "bus_bytes_per_s": "",
                         "url": blob("xla_collective"), "tool": "xla/tools/collective_perf_table_gen",
                         "version": XLA_COLLECTIVE_COMMIT, "conditions": conditions, "kind": "measured"})
    rows.sort(key=lambda r: (r["device"], r["collective"], r["gpus"], r["message_bytes"]))
    return rows


def _mle_row(device, collective, gpus, message, anchor, tool, conditions, *, time_s="", alg="", bus="",
             algorithm="", dtype="fp32"):
    return {"source": "ml-engineering-network", "device": device, "collective": collective, "gpus": gpus,
            "message_bytes": message, "dtype": dtype, "algorithm": algorithm, "time_s": time_s,
            "alg_bytes_per_s": alg, "bus_bytes_per_s": bus, "url": blob("mle_network", anchor), "tool": tool,
            "version": MLE_COMMIT, "conditions": conditions, "kind": "measured"}


def mle_collective_rows(root: Path) -> list[dict]:
    text = source_text(root, "mle_network")
    rows = []

    # 8x A100, nccl-tests all_reduce_perf -b 32k -e 16G -f 2 -g 8 -n 50
    start = text.index("$ ./build/all_reduce_perf -b 32k -e 16G -f 2 -g 8 -n 50")
    block = text[start:text.index("```", start)]
    for line in block.splitlines():
        cells = line.split()
        if len(cells) == 4 and re.fullmatch(r"[\d_]+", cells[0]):
            rows.append(_mle_row("a100-sxm-80gb", "all_reduce", 8, int(cells[0].replace("_", "")),
                                 "#real-network-throughput", "nccl-tests all_reduce_perf",
                                 "single 8x A100 node, NVLink 3 (300 GBps uni-dir.); -g 8 -n 50; float sum; columns "
                                 "trimmed by the author (in/out-of-place not stated); A100 memory size not stated",
                                 time_s=scaled(cells[1], MICRO), alg=scaled(cells[2], GIGA), bus=scaled(cells[3], GIGA)))

    # 8x H200, all_reduce_bench.py sweep
    start = text.index("$ python -u -m torch.distributed.run --nproc_per_node=8 all_reduce_bench.py")
    block = text[start:text.index("```", start)]
    for payload, bus, alg in re.findall(r"\|\s*(\d+[KMG]iB)\s*\|\s*([\d.]+)GBps\s*\|\s*([\d.]+)GBps\s*\|", block):
        rows.append(_mle_row("h200-sxm", "all_reduce", 8, binary_bytes(payload), "#real-network-throughput",
                             "ml-engineering all_reduce_bench.py (torch.distributed, NCCL)",
                             "single 8x H200 node (NVLink 4, NVSwitch); torch 2.9.1+cu130, cuda 13.0, nccl 2.27.7; "
                             "5 warm-up and 20 timed iterations per payload; fp32; NCCL picks Ring/LL up to 1MiB and "
                             "NVLS from 2MiB (per the text)", alg=scaled(alg, GIGA), bus=scaled(bus, GIGA)))

    # 1x P6-B200 node, all_reduce_bench.py sweep (the '1 node' column only)
    start = text.index("| payload | 1 node     | 4 nodes    | slowdown |")
    block = text[start:text.index("\n\n", start)]
    for payload, one_node in re.findall(r"\|\s*(\d+[KMG]iB)\s*\|\s*([\d.]+)GBps\s*\|", block):
        rows.append(_mle_row("b200", "all_reduce", 8, binary_bytes(payload),
                             "#inter-node-speed-depends-on-intra-node-speed",
                             "ml-engineering all_reduce_bench.py (torch.distributed, NCCL)",
                             "single AWS P6-B200 node, 8x B200 over NVLink 5; torch 2.9.1+cu130, cuda 13.0, "
                             "nccl 2.27.7; fp32; the '1 node' column (4-node column skipped)",
                             bus=scaled(one_node, GIGA)))

    # GPU-count sweeps at 8GiB with and without NVLS (nccl-tests)
    for device, marker, note in (
            ("h200-sxm", "Measured on an 8x H200 node at an 8GiB payload",
             "8x H200 node; each GPU count run as-is and with NCCL_NVLS_ENABLE=0"),
            ("b200", "The same sweep on an 8x B200 `p6-b200.48xlarge` node",
             "8x B200 p6-b200.48xlarge node, nccl 2.27.7, measured 2026-08-09; AWS ofi tuner plugin")):
        start = text.index(marker)
        start = text.index("| GPUs |", start)
        block = text[start:text.index("\n\n", start)]
        for gpus, algo, bus_default, bus_off in re.findall(
                r"\|\s*(\d+)\s*\|\s*(\w+)\s*\|\s*([\d.]+)GBps\s*\|\s*([\d.]+)GBps\s*\|", block):
            rows.append(_mle_row(device, "all_reduce", int(gpus), 8 * 2**30, "#sharp", "nccl-tests all_reduce_perf",
                                 f"{note}; NCCL default selection", algorithm=algo, bus=scaled(bus_default, GIGA)))
            rows.append(_mle_row(device, "all_reduce", int(gpus), 8 * 2**30, "#sharp", "nccl-tests all_reduce_perf",
                                 f"{note}; NCCL_NVLS_ENABLE=0", algorithm="Ring", bus=scaled(bus_off, GIGA)))

    # 8x H200 at 16GiB per collective (nccl-tests -b 16G -e 16G -g 8 -z 1)
    start = text.index("| collective                       | algo | busbw     | % of 450GBps |")
    block = text[start:text.index("\n\n", start)]
    names = {"all-reduce": "all_reduce", "all-gather": "all_gather", "reduce-scatter": "reduce_scatter"}
    for label, env, algo, bus in re.findall(
            r"\|\s*([a-z-]+)(?:, `([A-Z_=01]+)`)?\s*\|\s*(\w+)\s*\|\s*([\d.]+)GBps\s*\|", block):
        rows.append(_mle_row("h200-sxm", names[label], 8, 16 * 2**30, "#sharp", f"nccl-tests {names[label]}_perf",
                             "8x H200 node; -b 16G -e 16G -g 8 -z 1" + (f"; {env}" if env else ""),
                             algorithm=algo, bus=scaled(bus, GIGA)))

    # 8x MI300X, all_reduce_bench.py at 4GiB for 2 and 8 GPUs
    start = text.index("was run on a 8x GPU AMD MI300X node with a 4GiB payload")
    block = text[start:text.index("i.e. 2 GPUs", start)]
    for gpus, bus in re.findall(r"- (\d+) GPUs:\s*([\d.]+)GBps", block):
        rows.append(_mle_row("mi300x", "all_reduce", int(gpus), 4 * 2**30, "#peer-to-peer-bandwidth",
                             "ml-engineering all_reduce_bench.py (torch.distributed, RCCL)",
                             "8x MI300X node (Infinity Fabric); GPUs of one node; software versions not stated",
                             bus=scaled(bus, GIGA)))
    return rows


# --------------------------------------------------------------------------------------------------
# attention: FlashAttention README figures, labels transcribed by hand (None: label hidden or overlapped)

SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
FA2_A100 = {  # assets/flash2_a100_fwd_bwd_benchmark.png, FlashAttention-2 bars, forward + backward
    (False, 64): (132, None, 162, 171, 175, 176),
    (False, 128): (None, None, 187, 196, 201, 203),
    (True, 64): (88, 119, 140, 156, 165, 171),
    (True, 128): (99, 133, 155, 173, 182, 189),
}
FA2_H100 = {  # assets/flash2_h100_fwd_bwd_benchmark.png; the two lower panels carry no caption and are skipped
    (False, 64): (215, 254, 274, 288, 294, 296),
    (False, 128): (248, 294, 320, 326, 335, 338),
}
FA3_FIGURE = {  # assets/flash3_fp16_fwd.png, forward only; (FlashAttention-2 bars, FlashAttention-3 bars)
    (False, 64): ((282, 306, 318, 321, 322, 324), (333, 392, 460, 476, 496, 497)),
    (True, 64): ((180, 229, 262, 284, 295, 299), (197, 265, 371, 420, 460, 473)),
    (False, 128): ((309, 350, 362, 368, 370, 370), (467, None, 625, 638, 646, 648)),
    (True, 128): ((191, 260, 298, 319, 333, 335), (292, 423, 521, 579, 602, 616)),
    (False, 256): ((275, 313, 321, 323, 324, 326), (482, None, 707, 736, 746, 756)),
    (True, 256): ((208, 251, 278, 293, 297, 298), (286, 427, 537, 612, 628, 642)),
}
FLOP_NOTE = ("TFLOP/s as the FlashAttention benchmarks count them: 4*batch*seq^2*heads*head_dim for the forward, "
             "halved when causal, x3.5 for forward+backward")


def attention_rows() -> list[dict]:
    rows = []

    def add(device, image, direction, implementation, causal, head_dim, values, conditions):
        for seq_len, value in zip(SEQ_LENS, values, strict=True):
            if value is None:
                continue
            rows.append({"source": "flash-attention-readme", "device": device, "dtype": "fp16",
                         "batch": 16384 // seq_len, "heads": 2048 // head_dim, "seq_len": seq_len,
                         "head_dim": head_dim, "causal": str(causal).lower(), "window": "", "block": "",
                         "direction": direction, "implementation": implementation, "measured_tflops": value,
                         "time_s": "",
                         "url": f"https://github.com/Dao-AILab/flash-attention/blob/{FLASH_ATTN_COMMIT}/{image}",
                         "tool": "FlashAttention authors' benchmark (README figure)",
                         "version": FLASH_ATTN_COMMIT, "conditions": f"{conditions}; {FLOP_NOTE}",
                         "kind": "measured"})

    fa2_setting = ("README 'Performance' figure, bar label transcribed; hidden dim 2048, batch 16k/seq_len (README); "
                   "FP16/BF16 per the figure's caption, the benchmark script uses fp16")
    for (causal, head_dim), values in FA2_A100.items():
        add("a100-sxm-80gb", "assets/flash2_a100_fwd_bwd_benchmark.png", "fwd_bwd", "flash-attention-2", causal,
            head_dim, values, f"A100 80GB SXM4 (figure title); {fa2_setting}")
    for (causal, head_dim), values in FA2_H100.items():
        add("h100-sxm", "assets/flash2_h100_fwd_bwd_benchmark.png", "fwd_bwd", "flash-attention-2", causal,
            head_dim, values, f"H100 80GB SXM5 (figure title); {fa2_setting}")
    fa3_setting = ("H100 80GB SXM5 (figure title), FP16 (caption); README FlashAttention-3 figure, bar label "
                   "transcribed; batch*seq_len = 16k and heads*head_dim = 2048 as in the FlashAttention-3 paper")
    for (causal, head_dim), (fa2, fa3) in FA3_FIGURE.items():
        add("h100-sxm", "assets/flash3_fp16_fwd.png", "fwd", "flash-attention-2", causal, head_dim, fa2, fa3_setting)
        add("h100-sxm", "assets/flash3_fp16_fwd.png", "fwd", "flash-attention-3", causal, head_dim, fa3, fa3_setting)
    return rows + axlearn_tpu_attention_rows()


# --------------------------------------------------------------------------------------------------
# attention on TPU: apple/axlearn's tpu_attention_benchmark.py, whose docstring prints the script's own
# output ("Sample outputs: (v5p)"). The printed blocks are kept below verbatim (``main`` checks them against
# the file at each commit when SOURCES_DIR holds apple+axlearn at that commit, as
# ``SOURCES_DIR/apple+axlearn@<commit>/<path>``), so the rows rebuild offline (tests). What the script ran
# at each commit (read from the same file and axlearn/common/flash_attention/{tpu_attention,utils}.py):
# * a5f0b462 ("Support SplashAttention"): batch 2, seq 2048, causal, block_size 512, bf16, random segment ids
#   (cumsum of Bernoulli draws). Splash attention refuses segment ids at that commit
#   (SplashAttentionUnsupportedError), so every row ran the legacy Pallas kernel
#   (jax.experimental.pallas.ops.tpu.flash_attention) with all block sizes 512.
# * c40b39a5 ("Optimize TPU Flash Attention"): batch 2, seq 8192, sliding window 1024 (mask q - k <= 1024 and
#   k <= q: 1025 keys including its own, the ``window`` column's convention), block_size 512, bf16, no segment
#   ids: splash attention with a LocalMask, fused backward kernel. The docstring's block is the PR's
#   "LocalMask (Proposed PR)" run (its commit message prints both runs).
# Both: "flash_fwd" is one jitted call (q*scale, q/k/v transposes to [b, n, t, h], the kernel, the output
# transpose); "flash_bwd" is jax.grad of the mean of that call, i.e. forward and backward in one executable
# (direction fwd_bwd). Host-timed: time.perf_counter around 5 calls, each followed by block_until_ready,
# after one warm-up; the mean is printed in seconds with 4 decimals. "TPU v5" is JAX's device_kind of v5p
# (v5e reports "TPU v5 lite"), and the docstring says v5p.

AXLEARN_PATH = "axlearn/common/flash_attention/tpu_attention_benchmark.py"
AXLEARN_RUNS = (
    # (commit, seq_len, window (keys per query) or None, implementation, _BENCHMARK_CONFIGS as
    # {name: (num_heads, per_head_dim)}, conditions, printed block)
    ("a5f0b462bcb06e7b43817e32a5ace7fb092d9322", 2048, None, "pallas-tpu-flash-attention (legacy)",
     {"1.2b": (32, 64), "12.6b": (40, 128), "29.6b": (56, 128), "65.2b": (72, 128), "134b": (88, 128),
      "261.7b": (110, 128), "539.5b": (140, 128)},
     "legacy Pallas TPU flash attention (splash refuses segment ids at this commit), all block sizes 512, random "
     "segment ids (cumsum of Bernoulli(0.5) draws: applied inside each block, no block skipped for them)",
     """Benchmarking attention representative of 1.2b model layer on TPU v5.
ref_fwd:0.0008s, flash_fwd:0.0007s
ref_bwd:0.0027s, flash_bwd:0.0026s

 Benchmarking attention representative of 12.6b model layer on TPU v5.
ref_fwd:0.0012s, flash_fwd:0.0010s
ref_bwd:0.0037s, flash_bwd:0.0026s

 Benchmarking attention representative of 29.6b model layer on TPU v5.
ref_fwd:0.0017s, flash_fwd:0.0013s
ref_bwd:0.0053s, flash_bwd:0.0034s

 Benchmarking attention representative of 65.2b model layer on TPU v5.
ref_fwd:0.0021s, flash_fwd:0.0015s
ref_bwd:0.0067s, flash_bwd:0.0042s

 Benchmarking attention representative of 134b model layer on TPU v5.
ref_fwd:0.0024s, flash_fwd:0.0018s
ref_bwd:0.0080s, flash_bwd:0.0050s

 Benchmarking attention representative of 261.7b model layer on TPU v5.
ref_fwd:0.0027s, flash_fwd:0.0019s
ref_bwd:0.0092s, flash_bwd:0.0056s

 Benchmarking attention representative of 539.5b model layer on TPU v5.
ref_fwd:0.0034s, flash_fwd:0.0023s
ref_bwd:0.0126s, flash_bwd:0.0070s
"""),
    ("c40b39a5fd12e62a664432ed8e035662c884094a", 8192, 1025, "splash-attention",
     {"1.2b": (16, 128), "12.6b": (40, 128), "29.6b": (56, 128), "65.2b": (72, 128), "134b": (88, 128),
      "261.7b": (110, 128)},
     "splash attention (jax.experimental.pallas.ops.tpu.splash_attention) with a LocalMask: sliding_window_size "
     "1024, causal (q - k <= 1024: 1025 keys with its own), all block sizes 512, fused backward kernel, no segment ids",
     """Benchmarking attention representative of 1.2b model layer on TPU v5.
ref_fwd:0.2291s, flash_fwd:0.0014s
ref_bwd:0.0217s, flash_bwd:0.0058s
Benchmarking attention representative of 12.6b model layer on TPU v5.
ref_fwd:0.5699s, flash_fwd:0.0032s
ref_bwd:0.0524s, flash_bwd:0.0152s
Benchmarking attention representative of 29.6b model layer on TPU v5.
ref_fwd:0.7957s, flash_fwd:0.0043s
ref_bwd:0.0731s, flash_bwd:0.0204s
Benchmarking attention representative of 65.2b model layer on TPU v5.
ref_fwd:1.0225s, flash_fwd:0.0055s
ref_bwd:0.0948s, flash_bwd:0.0262s
Benchmarking attention representative of 134b model layer on TPU v5.
ref_fwd:1.2485s, flash_fwd:0.0067s
ref_bwd:0.1159s, flash_bwd:0.0313s
Benchmarking attention representative of 261.7b model layer on TPU v5.
ref_fwd:1.5577s, flash_fwd:0.0072s
ref_bwd:0.1349s, flash_bwd:0.0373s
"""),
)
AXLEARN_BLOCK = 512  # block_size=4 * 128 in the script's __main__ at both commits
AXLEARN_PROTOCOL = ("host-timed: time.perf_counter around 5 calls, each followed by block_until_ready, after one "
                    "warm-up; the mean printed in s with 4 decimals (0.1 ms resolution); includes host dispatch and "
                    "sync; 'TPU v5' device_kind, the docstring says v5p; bf16, batch 2; the timed call includes "
                    "q*softmax_scale and the q/k/v/output transposes between [b, t, n, h] and [b, n, t, h]")
_AXLEARN_LINE = re.compile(r"Benchmarking attention representative of (\S+) model layer on (TPU v5)\.\n"
                           r"ref_fwd:[\d.]+s, flash_fwd:([\d.]+)s\nref_bwd:[\d.]+s, flash_bwd:([\d.]+)s")


def axlearn_printed_block(text: str) -> str:
    """The script's printed output in its module docstring (the lines after 'Sample outputs'), as kept above."""
    docstring = text[text.index('"""') + 3:]
    docstring = docstring[:docstring.index('"""')]
    start = docstring.index("Benchmarking attention representative")
    return docstring[start:]


def check_axlearn_sources(root: Path) -> None:
    """Where SOURCES_DIR holds the benchmark file at a commit, its printed block must be the one kept here."""
    for commit, *_rest, printed in AXLEARN_RUNS:
        path = root / f"apple+axlearn@{commit}" / AXLEARN_PATH
        if path.is_file() and axlearn_printed_block(path.read_text(encoding="utf-8")) != printed:
            raise SystemExit(f"{path}: the printed block differs from AXLEARN_RUNS[{commit[:8]}]")


def axlearn_tpu_attention_rows() -> list[dict]:
    rows = []
    for commit, seq_len, window, implementation, configs, conditions, printed in AXLEARN_RUNS:
        matches = _AXLEARN_LINE.findall(printed)
        assert len(matches) == len(configs), commit
        for name, _kind, forward, both in matches:
            heads, head_dim = configs[name]
            for direction, seconds in (("fwd", forward), ("fwd_bwd", both)):
                what = ("'flash_fwd'" if direction == "fwd" else
                        "'flash_bwd': jax.grad of the mean of the attention call, forward and backward in one executable")
                rows.append({"source": "axlearn-tpu-attention-benchmark", "device": "tpu-v5p", "dtype": "bf16",
                             "batch": 2, "heads": heads, "seq_len": seq_len, "head_dim": head_dim, "causal": "true",
                             "window": window or "", "block": AXLEARN_BLOCK, "direction": direction,
                             "implementation": implementation, "measured_tflops": "", "time_s": seconds,
                             "url": f"https://github.com/apple/axlearn/blob/{commit}/{AXLEARN_PATH}",
                             "tool": "axlearn tpu_attention_benchmark.py (docstring sample output)", "version": commit,
                             "conditions": f"'{name}' config; {what}; {conditions}; {AXLEARN_PROTOCOL}",
                             "kind": "measured"})
    return rows


# --------------------------------------------------------------------------------------------------


def source_text(root: Path, key: str) -> str:
    repo, path, _commit = SOURCES[key]
    return (root / repo / path).read_text(encoding="utf-8")


def write(path: Path, columns: list[str], rows: list[dict]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"{path}: {len(rows)} rows")


def main(argv: list[str]) -> None:
    """``SOURCES_DIR [OUT_DIR] [--only attention]``: ``--only attention`` rewrites attention.csv alone (its rows
    are kept in this file, checked against SOURCES_DIR's copies where it has them); the other files need every
    source and would drop the TPU rows appended after this script's output (README.md)."""
    only = None
    if "--only" in argv:
        position = argv.index("--only")
        only, argv = argv[position + 1], argv[:position] + argv[position + 2:]
        if only != "attention":
            raise SystemExit(f"--only: only 'attention' can be written alone, not {only!r}")
    root = Path(argv[0])
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent
    if only is None:
        write(out / "matmul.csv", MATMUL_COLUMNS,
              xla_matmul_rows(root) + mamf_rows(root) + deepgemm_rows(root) + tilelang_fp8_rows(root))
        # gpu-stream/a100_80.txt is left out: its triad figure is a validation row (README.md).
        memory = (stream_rows(root, "stream_h200", "h200")
                  + cache_rows(root, "cache_a100", "a100")
                  + l2_cache_rows(root, "l2_a100", "a100") + l2_cache_rows(root, "l2_h200", "h200"))
        write(out / "memory_bandwidth.csv", MEMORY_COLUMNS, memory)
        write(out / "collectives.csv", COLLECTIVE_COLUMNS, xla_collective_rows(root) + mle_collective_rows(root))
    check_axlearn_sources(root)
    write(out / "attention.csv", ATTENTION_COLUMNS, attention_rows())


if __name__ == "__main__":
    main(sys.argv[1:])
