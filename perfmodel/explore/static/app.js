// perfmodel explore: every number comes from POST /api/<view> (perfmodel.explore.api); this file only
// reads the inputs, asks, and draws (plotly.js, served from the installed plotly package).
"use strict";

const $ = (id) => document.getElementById(id);
const BOUND_COLOURS = { compute: "#d62728", scheduling: "#9467bd", link: "#8c564b", memory: "#1f77b4" };
const LEVEL_DASH = ["solid", "dash", "dot", "dashdot", "longdash"];
const state = { options: null, whatif: [], redraws: {} };
window.perfmodelExplore = state; // the browser tests and the redraw benchmark read state.redraws

async function api(view, inputs) {
  const status = $("status");
  status.textContent = `computing ${view}...`;
  status.className = "";
  const response = await fetch(`/api/${view}`, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(inputs || {}),
  });
  const data = await response.json();
  if (!response.ok) {
    status.textContent = data.error;
    status.className = "error";
    throw new Error(data.error);
  }
  status.textContent = "";
  return data;
}

// A redraw that is asked for while one runs is run once more when it ends (the latest inputs win).
function live(name, draw) {
  let running = false, pending = false;
  const run = async () => {
    if (running) { pending = true; return; }
    running = true;
    const started = performance.now();
    try { await draw(); } catch (error) { console.error(error); }
    const record = state.redraws[name] || (state.redraws[name] = { count: 0, ms: [] });
    record.count += 1;
    record.ms.push(performance.now() - started);
    running = false;
    if (pending) { pending = false; run(); }
  };
  return run;
}

// --- formatting: SI prefixes, 4 significant digits ---------------------------------------------------------
function si(value, unit) {
  if (value === null || value === undefined || !isFinite(value)) return "-";
  const prefixes = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"], [1, ""], [1e-3, "m"], [1e-6, "µ"], [1e-9, "n"]];
  const size = Math.abs(value);
  for (const [scale, prefix] of prefixes) {
    if (size >= scale || scale === 1e-9) return `${(value / scale).toPrecision(4)} ${prefix}${unit}`;
  }
  return `${value} ${unit}`;
}
const plain = (value) => (value === null || value === undefined || !isFinite(value)) ? "-" : Number(value).toPrecision(4);
const pct = (value) => (value === null || value === undefined) ? "-" : `${(100 * value).toFixed(1)}%`;

function cell(text, id, value) {
  const td = document.createElement("td");
  td.textContent = text;
  if (id) td.id = id;
  if (value !== undefined && value !== null && typeof value !== "string") { td.dataset.value = String(value); td.className = "num"; }
  return td;
}

function table(element, header, rows) {
  element.replaceChildren();
  const head = element.insertRow();
  for (const name of header) { const th = document.createElement("th"); th.textContent = name; head.appendChild(th); }
  for (const row of rows) {
    const tr = element.insertRow();
    for (const item of row) tr.appendChild(item instanceof HTMLElement ? item : cell(String(item)));
  }
}

function fill(select, values, chosen) {
  select.replaceChildren(...values.map((value) => {
    const option = document.createElement("option");
    option.value = option.textContent = value;
    option.selected = Array.isArray(chosen) ? chosen.includes(value) : value === chosen;
    return option;
  }));
}
const picked = (select) => Array.from(select.selectedOptions).map((option) => option.value);
const logAxis = (title) => ({ type: "log", title: { text: title }, exponentformat: "SI" });
const plotConfig = { displaylogo: false, responsive: false };

// --- Roofline ------------------------------------------------------------------------------------------------
function roofInputs() {
  const file = $("rf-workload-file").value.trim();
  const inputs = { systems: picked($("rf-systems")), workload: file || $("rf-workload").value,
                   parameters: $("rf-parameters").value, kind: $("rf-kind").value, set: {} };
  const field = state.whatif.find((item) => item.field === $("rf-field").value);
  const factor = Math.pow(2, Number($("rf-scale").value));
  if (field && factor !== 1) inputs.set[field.field] = scaleValue(field, factor);
  return inputs;
}

function scaleValue(field, factor) {
  const number = field.number * factor;
  return `${Number(number.toPrecision(6))} ${field.unit}`.trim();
}

function showWhatIf() {
  const field = state.whatif.find((item) => item.field === $("rf-field").value);
  const factor = Math.pow(2, Number($("rf-scale").value));
  $("rf-whatif").textContent = field ? `${field.field} = ${scaleValue(field, factor)} (x${factor.toFixed(2)}; spec: ${field.value})` : "";
}

const MEMORY_COLOURS = ["#1f77b4", "#6baed6", "#08519c", "#17becf", "#9ecae1"];
function boundColour(bound) {
  const [family, level] = bound.split(":");
  if (family === "memory" && level) {
    const levels = state.memoryLevels || (state.memoryLevels = []);
    if (!levels.includes(level)) levels.push(level);
    return MEMORY_COLOURS[levels.indexOf(level) % MEMORY_COLOURS.length];
  }
  return BOUND_COLOURS[family] || "#7f7f7f";
}

function roofTraces(chart, kind, xs) {
  const traces = [];
  if (kind === "scheduling") {
    const ceiling = (fixed) => xs.map((f) => f / (f / chart.peak_flops_per_s + fixed));
    traces.push({ x: xs, y: xs.map(() => chart.peak_flops_per_s), mode: "lines", name: `peak ${chart.dtype}`, line: { color: "black" } });
    if (chart.launch_s > 0) traces.push({ x: xs, y: ceiling(chart.launch_s), mode: "lines", name: `launch ceiling (${si(chart.launch_s, "s")})`, line: { color: "#9467bd", dash: "dash" } });
    if (chart.kernel_fixed_s > 0) traces.push({ x: xs, y: ceiling(chart.kernel_fixed_s), mode: "lines", name: `kernel fixed time (${si(chart.kernel_fixed_s, "s")})`, line: { color: "#17becf", dash: "dot" } });
    return traces;
  }
  chart.roofs.forEach((roof, index) => {
    traces.push({ x: xs, y: xs.map((x) => Math.min(chart.peak_flops_per_s, x * roof.bandwidth_bytes_per_s)), mode: "lines",
                  name: `${roof.label} ${si(roof.bandwidth_bytes_per_s, "B/s")}`, line: { color: "black", dash: LEVEL_DASH[index % 5] } });
  });
  return traces;
}

function drawRoofline(element, chart, kind) {
  const scheduling = kind === "scheduling";
  const xOf = (p) => scheduling ? p.granularity_flops_per_launch : p.intensity_flop_per_byte;
  const finite = chart.points.map(xOf).filter((x) => x !== null && x > 0 && isFinite(x));
  const ridge = scheduling ? chart.scheduling_ridge_flops_per_launch : chart.ridge_flop_per_byte;
  const low = Math.min(ridge / 100, ...finite) / 2, high = Math.max(ridge * 100, ...finite) * 2;
  const xs = Array.from({ length: 80 }, (_, i) => low * Math.pow(high / low, i / 79));
  const traces = roofTraces(chart, kind, xs);
  const groups = {};
  for (const p of chart.points) {
    let x = xOf(p);
    if (scheduling && !(x > 0)) continue;
    if (x === null || !isFinite(x)) x = high / 1.5; // moves no bytes at this level: the right edge
    const group = groups[p.bound] || (groups[p.bound] = { x: [], y: [], text: [], size: [] });
    group.x.push(x); group.y.push(p.achieved_flops_per_s); group.size.push(6 + 30 * Math.sqrt(p.time_share));
    group.text.push(`${p.name} (${p.kind})<br>bound: ${p.bound}<br>level: ${p.level}<br>` +
                    (scheduling ? `FLOPs per launch: ${si(p.granularity_flops_per_launch, "FLOP")}` : `intensity: ${plain(p.intensity_flop_per_byte)} FLOP/B`) +
                    `<br>achieved: ${si(p.achieved_flops_per_s, "FLOP/s")}<br>share of time: ${pct(p.time_share)}`);
  }
  for (const [bound, group] of Object.entries(groups)) {
    traces.push({ x: group.x, y: group.y, text: group.text, hoverinfo: "text", mode: "markers", name: `ops bound by ${bound}`,
                  marker: { color: boundColour(bound), size: group.size, opacity: 0.75, line: { color: "white", width: 1 } } });
  }
  const layout = {
    title: { text: `${chart.spec}: ${kind} roofline (${chart.dtype}), total ${si(chart.total_s, "s")}` },
    xaxis: logAxis(scheduling ? "FLOPs per launch" : "arithmetic intensity (FLOP/byte)"),
    yaxis: logAxis("attained FLOP/s"), legend: { font: { size: 10 } }, margin: { t: 50, r: 10 }, hovermode: "closest",
  };
  return Plotly.react(element, traces, layout, plotConfig);
}

const redrawRoofline = live("roofline", async () => {
  showWhatIf();
  const inputs = roofInputs();
  if (!inputs.systems.length) return;
  const data = await api("roofline", inputs);
  const holder = $("rf-charts");
  while (holder.children.length > data.charts.length) holder.lastChild.remove();
  while (holder.children.length < data.charts.length) { const div = document.createElement("div"); div.className = "chart"; holder.appendChild(div); }
  $("rf-summary").replaceChildren(...data.charts.map((chart, index) => {
    const span = document.createElement("span");
    span.id = `rf-total-${index}`;
    span.dataset.value = String(chart.total_s);
    span.textContent = `${chart.spec}: ${si(chart.total_s, "s")} (${data.ops} ops of ${data.workload})  `;
    return span;
  }));
  await Promise.all(data.charts.map((chart, index) => drawRoofline(holder.children[index], chart, data.kind)));
});

async function loadWhatIfFields() {
  const system = picked($("rf-systems"))[0];
  if (!system) return;
  const data = await api("whatif_fields", { system, parameters: $("rf-parameters").value });
  state.whatif = data.fields;
  const current = $("rf-field").value;
  fill($("rf-field"), data.fields.map((field) => field.field), current || (data.fields.find((f) => /^memory\.(hbm|dram|lpddr\w*)\.bandwidth$/.test(f.field))
                                                           || data.fields.find((f) => /bandwidth/.test(f.field)) || data.fields[0]).field);
  $("rf-scale").value = 0;
}

// --- LLM -----------------------------------------------------------------------------------------------------
const power2 = (id) => Math.pow(2, Number($(id).value));

function llmInputs() {
  const systems = [$("llm-system-a").value];
  if ($("llm-system-b").value !== "(none)") systems.push($("llm-system-b").value);
  for (const name of ["batch", "prompt", "gen"]) $(`llm-${name}-value`).textContent = power2(`llm-${name}`);
  return { model: $("llm-model").value, systems, parameters: $("llm-parameters").value, weights: $("llm-weights").value,
           tp: Number($("llm-tp").value), pp: Number($("llm-pp").value),
           batch: power2("llm-batch"), prompt: power2("llm-prompt"), gen: power2("llm-gen"),
           confidence: Number($("llm-confidence").value) / 100 };
}

const LLM_ROWS = [
  ["TTFT", "ttft_s", (v) => si(v, "s")], ["TPOT", "tpot_s", (v) => si(v, "s")], ["end-to-end", "e2e_s", (v) => si(v, "s")],
  ["tokens/s (batch)", "tokens_per_s", plain], ["tokens/s per user", "tokens_per_s_per_user", plain],
  ["tokens/s per chip", "tokens_per_s_per_chip", plain], ["memory per chip", "memory_total_bytes", (v) => si(v, "B")],
  ["capacity per chip", "capacity_bytes_per_chip", (v) => si(v, "B")],
];

// One figure's interval cell: "low - high" (perfmodel llm's column), the ends in data-low/data-high.
function intervalCell(band, id, format) {
  const td = cell("", id);
  if (!band) return td;
  if (band.low === null || band.high === null) { td.textContent = "no evidence"; td.className = "none"; return td; }
  td.textContent = `${format(band.low)} - ${format(band.high)}`;
  td.dataset.low = String(band.low);
  td.dataset.high = String(band.high);
  td.className = "num interval";
  return td;
}

const redrawLLM = live("llm", async () => {
  const data = await api("llm", llmInputs());
  const level = `${Number((100 * data.confidence).toPrecision(3))}% interval`;
  $("llm-confidence-value").textContent = `${Number((100 * data.confidence).toPrecision(3))}%`;
  const rows = LLM_ROWS.map(([label, key, format]) => [label, ...data.results.flatMap((r, i) => [
    cell(format(r[key]), `llm-${key}-${i}`, r[key]), intervalCell(r.intervals[key], `llm-${key}-${i}-interval`, format)])]);
  const wide = (text, id) => { const td = cell(text, id); td.colSpan = 2; return td; };
  rows.push(["fits", ...data.results.map((r, i) => wide(r.fits ? "yes" : "NO", `llm-fits-${i}`))]);
  rows.push(["bound (prefill / decode)", ...data.results.map((r, i) => wide(`${r.bound_by_phase.prefill} / ${r.bound_by_phase.decode}`, `llm-bound-${i}`))]);
  rows.push(["mode, parameters", ...data.results.map((r) => wide(`${r.mode}; ${r.parameters}`))]);
  rows.push([`${level}: basis`, ...data.results.map((r, i) => { const td = wide(r.intervals.basis, `llm-basis-${i}`); td.className = "basis"; return td; })]);
  table($("llm-table"), [`${data.model}`, ...data.results.flatMap((r) => [`${r.chips} x ${r.hardware}`, level])], rows);
  const bounds = [...new Set(data.results.flatMap((r) => Object.values(r.time_by_bound_by_phase).flatMap(Object.keys)))];
  const phaseTraces = bounds.map((bound) => ({
    type: "bar", name: bound, marker: { color: boundColour(bound) },
    x: data.results.flatMap((r) => Object.keys(r.time_by_bound_by_phase).map((phase) => `${r.hardware}<br>${phase}`)),
    y: data.results.flatMap((r) => Object.values(r.time_by_bound_by_phase).map((shares) => {
      const total = Object.values(shares).reduce((a, b) => a + b, 0);
      return total > 0 ? 100 * (shares[bound] || 0) / total : 0;
    })),
  }));
  const drawn = [Plotly.react($("llm-phases"), phaseTraces, {
    barmode: "stack", title: { text: "phase breakdown: share of time by bound" }, yaxis: { title: { text: "% of the phase's time" } },
    margin: { t: 50, r: 10 }, legend: { font: { size: 10 } } }, plotConfig)];
  const parts = ["weights", "kv_cache", "activations", "workspace"];
  const memoryTraces = parts.map((part) => ({ type: "bar", name: part, x: data.results.map((r) => r.hardware),
                                              y: data.results.map((r) => r.memory_bytes[part] / 1e9) }));
  memoryTraces.push({ type: "scatter", mode: "markers", name: "capacity per chip", marker: { symbol: "line-ew-open", size: 40, color: "black" },
                      x: data.results.map((r) => r.hardware), y: data.results.map((r) => r.capacity_bytes_per_chip / 1e9) });
  drawn.push(Plotly.react($("llm-memory"), memoryTraces, {
    barmode: "stack", title: { text: "memory per chip (fullest pipeline stage)" }, yaxis: { title: { text: "GB" } },
    margin: { t: 50, r: 10 }, legend: { font: { size: 10 } } }, plotConfig));
  await Promise.all(drawn);
});

// --- Serving and sizing ----------------------------------------------------------------------------------
async function runServing() {
  const data = await api("serving", {
    model: $("sv-model").value, system: $("sv-system").value, tp: Number($("sv-tp").value), rates: $("sv-rates").value,
    prompt_dist: $("sv-prompt").value, output_dist: $("sv-output").value, requests: Number($("sv-requests").value),
    ttft_slo: $("sv-ttft").value,
  });
  const knee = data.knee_rate_per_s;
  $("sv-knee").textContent = `${data.model} on ${data.spec} (${data.mode} mode): knee ${knee === null ? "none" : knee + " requests/s"}`;
  $("sv-knee").dataset.value = String(knee);
  const r = data.results;
  const traces = [
    { x: data.rates, y: r.map((x) => x.tokens_per_s), name: "output tokens/s", mode: "lines+markers", yaxis: "y" },
    { x: data.rates, y: r.map((x) => x.ttft_s.p99), name: "TTFT p99 (s)", mode: "lines+markers", yaxis: "y2" },
    { x: data.rates, y: r.map((x) => x.tpot_s.p99), name: "TPOT p99 (s)", mode: "lines+markers", yaxis: "y2", line: { dash: "dot" } },
  ];
  const shapes = knee === null ? [] : [{ type: "line", x0: knee, x1: knee, yref: "paper", y0: 0, y1: 1, line: { color: "#f0b429", width: 3, dash: "dash" } }];
  await Plotly.react($("sv-chart"), traces, {
    title: { text: `load vs latency (simulated, ${r[0].requests} requests a rate)${knee === null ? "" : `; knee at ${knee}/s`}` },
    xaxis: { type: "log", title: { text: "offered load (requests/s, Poisson)" } }, yaxis: { title: { text: "output tokens/s" } },
    yaxis2: { type: "log", tickformat: ".2~s", title: { text: "latency p99 (s)" }, overlaying: "y", side: "right" }, shapes, margin: { t: 50 },
    legend: { x: 0.02, y: 0.98 } }, plotConfig);
  table($("sv-table"), ["rate (req/s)", "req/s", "tokens/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "steady"],
        r.map((x, i) => [cell(String(data.rates[i]), null, data.rates[i]), cell(plain(x.requests_per_s), `sv-rps-${i}`, x.requests_per_s),
                         cell(plain(x.tokens_per_s), `sv-tps-${i}`, x.tokens_per_s), cell(si(x.ttft_s.p50, "s"), null, x.ttft_s.p50),
                         cell(si(x.ttft_s.p99, "s"), `sv-ttft99-${i}`, x.ttft_s.p99), cell(si(x.tpot_s.p50, "s"), null, x.tpot_s.p50),
                         cell(si(x.tpot_s.p99, "s"), null, x.tpot_s.p99), x.steady_state === null ? "-" : x.steady_state ? "yes" : "no"]));
}

function download(name, data) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([JSON.stringify(data, null, 1)], { type: "application/json" }));
  link.download = name;
  link.click();
}

async function runSizing() {
  const level = $("sz-confidence").value;
  const data = await api("size", { model: $("sv-model").value, systems: picked($("sz-systems")), rate: Number($("sz-rate").value),
                                   ttft_slo: $("sz-ttft").value, tpot_slo: $("sz-tpot").value,
                                   ...(level === "median" ? { at_median: true } : { confidence: Number(level) }) });
  table($("sz-table"), ["system", "chips", "replicas x (tp, pp)", "mode", "TTFT p99", "TPOT p99", "tokens/s", "power", "USD/M tokens",
                        `targets held at ${level === "median" ? "the median" : `${Math.round(100 * Number(level))}% confidence`}`, "note", ""],
        data.systems.map((s, i) => {
          const b = s.best;
          const button = document.createElement("button");
          button.textContent = "export";
          button.id = `sz-export-${i}`;
          button.onclick = () => download(`${s.hardware}-deployment.json`, { model: data.model, rate_per_s: data.rate_per_s, targets: data.targets, ...s });
          const exportCell = document.createElement("td");
          if (b) exportCell.appendChild(button);
          const held = cell(`x ${s.confidence.limit_factor.toPrecision(3)} (${s.confidence.basis})`, `sz-held-${i}`, s.confidence.limit_factor);
          held.className = "num basis";
          if (!b) return [s.hardware, "-", "-", s.mode, "-", "-", "-", "-", "-", held, s.note, exportCell];
          return [s.hardware, cell(String(b.chips), `sz-chips-${i}`, b.chips), `${b.replicas} x (tp ${b.tp}, pp ${b.pp})`, b.mode,
                  cell(si(b.ttft_s.p99, "s"), null, b.ttft_s.p99), cell(si(b.tpot_s.p99, "s"), null, b.tpot_s.p99),
                  cell(plain(b.tokens_per_s), null, b.tokens_per_s), si(b.power_watts, "W"),
                  b.usd_per_million_tokens === null ? "n/a" : b.usd_per_million_tokens.toFixed(2), held, s.note, exportCell];
        }));
}

// --- Pareto front (perfmodel search) ------------------------------------------------------------------------
function searchInputs() {
  return { model: $("sv-model").value, system: $("sv-system").value, chips: Number($("pf-chips").value),
           prompt: Number($("pf-prompt").value), output: Number($("pf-output").value), ttft_slo: $("pf-ttft").value,
           tpot_slo: $("pf-tpot").value, disagg: $("pf-disagg").checked };
}

async function runSearch() {
  const data = await api("search", searchInputs());
  state.search = data;
  const front = data.front;
  const slo = [data.ttft_slo_s === null ? null : `TTFT <= ${si(data.ttft_slo_s, "s")}`,
               data.tpot_slo_s === null ? null : `TPOT <= ${si(data.tpot_slo_s, "s")}`].filter(Boolean).join(" and ") || "none";
  $("pf-summary").textContent = `${data.model} on ${data.chips} chips of ${data.system} (${data.engines.join(", ")}): ` +
    `${data.configurations} configurations, ${front.length} on the front; SLO region: ${slo}; ` +
    (data.chosen === null ? "no front point meets the SLO" : `chosen #${data.chosen} (the SLO region's most tokens/s per chip)`);
  $("pf-summary").dataset.value = String(data.chosen);
  const p = data.points;
  const xs = front.map((c) => c.tokens_per_s_per_user), ys = front.map((c) => c.tokens_per_s_per_chip);
  const xmax = Math.max(...p.tokens_per_s_per_user) * 1.05, ymax = Math.max(...p.tokens_per_s_per_chip) * 1.05;
  const traces = [
    { x: p.tokens_per_s_per_user, y: p.tokens_per_s_per_chip, mode: "markers", name: "configurations tried",
      marker: { color: "#bbbbbb", size: 4 }, hoverinfo: "skip" },
    { x: xs, y: ys, mode: "lines+markers", name: "Pareto front", line: { color: "#1f77b4", shape: "vh" },
      marker: { size: 10, color: front.map((c) => c.meets_slo ? "#2ca02c" : "#d62728") },
      text: front.map((c, i) => `#${i + 1} ${c.label}<br>${c.chips} chips; TTFT ${si(c.ttft_s, "s")}, TPOT ${si(c.tpot_s, "s")}` +
                                 `<br>${c.meets_slo ? "in" : "outside"} the SLO region`), hoverinfo: "text" },
  ];
  if (data.chosen !== null) traces.push({ x: [xs[data.chosen - 1]], y: [ys[data.chosen - 1]], mode: "markers", name: "chosen",
                                          marker: { size: 18, symbol: "star", color: "#f0b429", line: { color: "black", width: 1 } } });
  const shapes = [];
  if (data.tpot_slo_s !== null) {
    shapes.push({ type: "rect", xref: "x", yref: "paper", x0: 1 / data.tpot_slo_s, x1: Math.max(xmax, 1.2 / data.tpot_slo_s), y0: 0, y1: 1,
                  fillcolor: "#2ca02c", opacity: 0.08, line: { width: 0 } });
    shapes.push({ type: "line", xref: "x", yref: "paper", x0: 1 / data.tpot_slo_s, x1: 1 / data.tpot_slo_s, y0: 0, y1: 1,
                  line: { color: "#2ca02c", dash: "dash" } });
  }
  await Plotly.react($("pf-chart"), traces, {
    title: { text: `Pareto front (estimates at full load); shaded: TPOT target met${data.ttft_slo_s === null ? "" : ", green points: TTFT too"}` },
    xaxis: { title: { text: "tokens/s per user (1 / TPOT)" }, range: [0, Math.max(xmax, data.tpot_slo_s ? 1.2 / data.tpot_slo_s : 0)] },
    yaxis: { title: { text: "tokens/s per chip" }, range: [0, ymax] }, shapes, margin: { t: 50 }, hovermode: "closest",
    legend: { x: 0.98, xanchor: "right", y: 0.98 } }, plotConfig);
  if (!state.searchClicks) { // a click on a front point chooses it for the export
    state.searchClicks = true;
    $("pf-chart").on("plotly_click", (event) => {
      const point = event.points.find((item) => item.curveNumber === 1);
      if (point) $("pf-pick").value = String(point.pointIndex + 1);
    });
  }
  table($("pf-table"), ["#", "deployment", "chips", "tokens/s per user", "tokens/s per chip", "tokens/s per W", "TTFT", "TPOT", "in SLO"],
        front.map((c, i) => [String(i + 1), c.label, cell(String(c.chips), `pf-chips-${i}`, c.chips),
                             cell(plain(c.tokens_per_s_per_user), `pf-user-${i}`, c.tokens_per_s_per_user),
                             cell(plain(c.tokens_per_s_per_chip), `pf-chip-${i}`, c.tokens_per_s_per_chip),
                             cell(plain(c.tokens_per_s_per_watt), null, c.tokens_per_s_per_watt),
                             cell(si(c.ttft_s, "s"), null, c.ttft_s), cell(si(c.tpot_s, "s"), null, c.tpot_s),
                             cell(c.meets_slo ? "yes" : "no", `pf-slo-${i}`)]));
  fill($("pf-pick"), front.map((_, i) => String(i + 1)), String(data.chosen === null ? 1 : data.chosen));
}

async function exportSearch() {
  const engine = $("pf-engine").value;
  const data = await api("search", { ...searchInputs(), pick: Number($("pf-pick").value), export: engine });
  $("pf-launch").textContent = data.launch.text;
  $("pf-launch").dataset.pick = String(data.chosen);
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([data.launch.text + "\n"], { type: "text/plain" }));
  link.download = `${data.system}-${engine}-launch.sh`;
  link.click();
}

// --- Specs and accuracy ---------------------------------------------------------------------------------------
async function showSpec() {
  const data = await api("specs", { system: $("sp-system").value });
  $("sp-title").textContent = `${data.system}: ${data.description} [${data.family}, ${data.vendor}]`;
  table($("sp-table"), ["field", "value", "source", "kind", "url", "written in"], data.fields.map((f, i) => {
    const link = document.createElement("td");
    if (f.url) { const a = document.createElement("a"); a.href = f.url; a.textContent = f.url; a.target = "_blank"; link.appendChild(a); }
    return [cell(f.field, `sp-field-${i}`), cell(String(f.value), `sp-value-${i}`), f.source, f.kind, link,
            cell(f.written, `sp-written-${i}`)];
  }));
}

async function showValidation() {
  $("va-summary").textContent = "running perfmodel validate (about half a minute the first time for the shipped table)...";
  const data = await api("validation", { csv: $("va-csv").value.trim() || null });
  const s = data.summary;
  $("va-summary").textContent = `${s.predicted} rows predicted, ${s.skipped} skipped; median |error| ${pct(s.all)}`;
  $("va-summary").dataset.value = String(s.all);
  const predicted = data.rows.filter((row) => row.predicted !== null);
  table($("va-table"), ["line", "group", "spec", "workload", "metric", "measured", "predicted", "error", "how"],
        predicted.map((row, i) => [cell(String(row.line), `va-line-${i}`), row.group, row.hardware, row.workload, row.metric,
                                   cell(`${plain(row.measured)} ${row.unit}`, null, row.measured),
                                   cell(plain(row.predicted), `va-predicted-${i}`, row.predicted),
                                   cell(row.error === null ? "-" : `${(100 * row.error).toFixed(1)}%`, `va-error-${i}`, row.error), row.how]));
}

// --- wiring -------------------------------------------------------------------------------------------------
function show(view) {
  for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.dataset.view === view);
  for (const section of document.querySelectorAll(".view")) section.classList.toggle("active", section.id === `view-${view}`);
  if (location.hash !== `#${view}`) history.replaceState(null, "", `#${view}`);
  window.dispatchEvent(new Event("resize"));
}

async function start() {
  const o = state.options = await api("options", {});
  fill($("rf-systems"), o.devices, ["h100-sxm", "tpu-v5e"]);
  const llmWorkloads = o.models.flatMap((m) => [`llm:${m}:prefill`, `llm:${m}:decode`]);
  fill($("rf-workload"), [...o.workloads, ...llmWorkloads], "transformer_block");
  for (const id of ["rf-parameters", "llm-parameters"]) fill($(id), o.parameter_sets, "achievable");
  fill($("rf-kind"), o.roofline_kinds, "classic");
  for (const id of ["llm-model", "sv-model"]) fill($(id), o.models, "llama-2-7b");
  fill($("llm-system-a"), o.devices, "h100-sxm");
  fill($("llm-system-b"), ["(none)", ...o.devices], "tpu-v5e");
  fill($("sv-system"), o.devices, "h100-sxm");
  fill($("sz-systems"), o.devices, ["h100-sxm", "tpu-v5e"]);
  fill($("sp-system"), o.specs, "h100-sxm");

  for (const id of ["rf-workload", "rf-parameters", "rf-kind", "rf-field"]) $(id).addEventListener("change", redrawRoofline);
  $("rf-workload-file").addEventListener("change", redrawRoofline);
  $("rf-systems").addEventListener("change", async () => { await loadWhatIfFields(); redrawRoofline(); });
  $("rf-parameters").addEventListener("change", loadWhatIfFields);
  $("rf-field").addEventListener("change", () => { $("rf-scale").value = 0; });
  $("rf-scale").addEventListener("input", redrawRoofline);
  $("rf-reset").addEventListener("click", () => { $("rf-scale").value = 0; redrawRoofline(); });
  for (const id of ["llm-model", "llm-system-a", "llm-system-b", "llm-parameters", "llm-weights", "llm-tp", "llm-pp"]) $(id).addEventListener("change", redrawLLM);
  for (const id of ["llm-batch", "llm-prompt", "llm-gen", "llm-confidence"]) $(id).addEventListener("input", redrawLLM);
  $("sv-run").addEventListener("click", runServing);
  $("sz-run").addEventListener("click", runSizing);
  $("pf-run").addEventListener("click", runSearch);
  $("pf-export").addEventListener("click", exportSearch);
  $("sp-system").addEventListener("change", showSpec);
  $("va-load").addEventListener("click", showValidation);
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => show(tab.dataset.view));

  show((location.hash || "#roofline").slice(1));
  await loadWhatIfFields();
  await Promise.all([redrawRoofline(), redrawLLM(), showSpec()]);
  document.body.dataset.ready = "true";
}

start();
