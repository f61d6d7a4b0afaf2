"""``perfmodel explore``: the JSON API and, in a real browser (Playwright driving Debian's Chromium),
each view's numbers against the engine's own API for the same inputs (issue 33).

Without Chromium or Playwright the browser tests fail with the reason, as every skip in this suite does
(``tests/conftest.py``): ``.ci/run`` installs Chromium, so a missing browser is a broken set-up."""

from __future__ import annotations

import json
import math
import re
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from perfmodel.explore import api
from perfmodel.explore.harness import chromium_path, explore_server
from perfmodel.explore.server import STATIC, make_server

pytest.importorskip("plotly", reason="perfmodel explore needs the 'explore' extra (plotly)")


# --- the API and the server, no browser --------------------------------------------------------------------

@pytest.fixture(scope="module")
def local_url():
    server = make_server()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _post(url: str, view: str, inputs: dict) -> tuple[int, dict]:
    request = urllib.request.Request(f"{url}/api/{view}", data=json.dumps(inputs).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_page_assets_are_served_locally_and_nothing_comes_from_the_network(local_url):
    for name in ("index.html", "app.js", "app.css"):
        text = (STATIC / name).read_text()
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), f"{name} loads a remote asset"
        assert "fetch(\"http" not in text
    with urllib.request.urlopen(f"{local_url}/static/plotly.min.js", timeout=30) as response:
        assert response.status == 200 and len(response.read()) > 1_000_000
    with urllib.request.urlopen(f"{local_url}/", timeout=30) as response:
        assert b'src="/static/plotly.min.js"' in response.read()


def test_bad_input_is_a_400_with_the_reason_and_an_unknown_view_a_404(local_url):
    status, data = _post(local_url, "llm", {"model": "llama-2-7b", "systems": ["h100-sxm"], "batch": 0})
    assert status == 400 and "batch" in data["error"]
    status, data = _post(local_url, "roofline", {"systems": ["no-such-spec"], "workload": "transformer_block"})
    assert status == 400 and "no-such-spec" in data["error"]
    status, data = _post(local_url, "nothing", {})
    assert status == 404 and "llm" in data["error"]
    status, data = _post(local_url, "llm", {"model": "llama-2-7b", "systems": ["h100-sxm"], "confidence": 1})
    assert status == 400 and "confidence" in data["error"]
    status, data = _post(local_url, "search", {"chips": 2, "engines": ["tgi"]})
    assert status == 400 and "engines" in data["error"] and "vllm" in data["error"]
    status, data = _post(local_url, "search", {"chips": 2, "pick": 999, "export": "vllm"})
    assert status == 400 and "pick" in data["error"]
    status, data = _post(local_url, "search", {"chips": 2, "export": "ollama"})
    assert status == 400 and "export" in data["error"]
    status, data = _post(local_url, "validation", {"csv": "/no/such/table.csv"})
    assert status == 400 and "/no/such/table.csv" in data["error"]


def test_the_api_answers_what_the_engine_computes(local_url):
    from perfmodel.hardware.loader import load_for_prediction
    from perfmodel.llm import Parallelism, Scenario, llm_predict
    from perfmodel.llm.catalog import load_architecture

    status, data = _post(local_url, "llm", {"model": "llama-2-7b", "systems": ["h100-sxm"], "batch": 4, "prompt": 512,
                                            "gen": 64, "set": {"memory.hbm.bandwidth": "4 TB/s"}})
    assert status == 200
    hardware = load_for_prediction("h100-sxm", overrides={"memory.hbm.bandwidth": "4 TB/s"}, engine=None)
    expected = llm_predict(load_architecture("llama-2-7b"), hardware,
                           Scenario(batch=4, prompt_tokens=512, generated_tokens=64), Parallelism())
    assert data["results"][0]["tpot_s"] == pytest.approx(expected.tpot_s, rel=1e-12)
    assert data["results"][0]["ttft_s"] == pytest.approx(expected.ttft_s, rel=1e-12)
    assert data["results"][0]["intervals"]["basis"].startswith("no 80% interval: a what-if spec")  # --set: no evidence


def test_llm_intervals_are_perfmodel_llms():
    """The LLM view's intervals are the ones ``perfmodel llm --json --confidence`` prints."""
    import contextlib
    import io

    from perfmodel.cli import main

    data = api.llm({"model": "llama-2-7b", "systems": ["h100-sxm"], "batch": 4, "prompt": 512, "gen": 64,
                    "confidence": 0.9})
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["llm", "--model", "llama-2-7b", "--on", "h100-sxm", "--batch", "4", "--prompt", "512", "--gen",
                     "64", "--confidence", "0.9", "--json"]) == 0
    cli = json.loads(printed.getvalue())["intervals"]
    shown = data["results"][0]["intervals"]
    assert set(shown) == set(cli) and shown["basis"] == cli["basis"] and shown["confidence"] == cli["confidence"]
    for key in set(cli) - {"basis", "confidence"}:
        assert shown[key]["low"] == pytest.approx(cli[key]["low"], rel=1e-12), key
        assert shown[key]["high"] == pytest.approx(cli[key]["high"], rel=1e-12), key
    assert cli["tpot_s"]["low"] is not None and cli["confidence"] == 0.9
    with pytest.raises(Exception, match="confidence"):
        api.llm({"model": "llama-2-7b", "systems": ["h100-sxm"], "confidence": 1.5})


def test_sizing_holds_targets_at_the_confidence_as_perfmodel_size_does(capsys):
    from perfmodel.cli import main

    for extra, inputs in (([], {"confidence": 0.9}), (["--at-median"], {"at_median": True})):
        command = ["size", "--model", "llama-2-7b", "--on", "h100-sxm", "--rate", "4/s", "--prompt", "512", "--gen", "128",
                   "--ttft-p99", "1s", "--tpot-p99", "50ms", "--requests", "60", "--json", "--confidence", "0.9", *extra]
        assert main(command) == 0
        cli = json.loads(capsys.readouterr().out)["h100-sxm"]
        shown = api.size({"model": "llama-2-7b", "systems": ["h100-sxm"], "rate": 4, "ttft_slo": "1s",
                          "tpot_slo": "50ms", "requests": 60, **inputs})["systems"][0]
        assert shown["confidence"] == cli["confidence"]
        assert shown["best"]["chips"] == cli["best"]["chips"]
        assert shown["best"]["tpot_s"]["p99"] == pytest.approx(cli["best"]["tpot_s"]["p99"], rel=1e-12)


def test_what_if_values_keep_their_unit():
    assert api.scaled("3.35 TB/s", 2) == "6.7 TB/s"
    assert api.scaled("132", 2) == "264"
    fields = {f["field"]: f for f in api.spec_numbers("h100-sxm")}
    assert fields["memory.hbm.bandwidth"]["unit"] == "TB/s"


def test_the_knee_of_a_load_sweep_is_one_definition_for_the_cli_and_the_explorer():
    from types import SimpleNamespace

    from perfmodel.serving import knee_rate

    def run(tokens_per_s: float, ttft_p99: float):
        return SimpleNamespace(tokens_per_s=tokens_per_s, ttft=SimpleNamespace(p99=ttft_p99))

    rates = [1.0, 2.0, 4.0, 8.0]
    results = [run(100, 0.1), run(200, 0.2), run(215, 0.9), run(216, 5.0)]
    assert knee_rate(rates, results, None) == 2.0  # 200 -> 215 grows by 7.5%: the knee is at 2/s
    assert knee_rate(rates, results, 1.0) == 4.0  # the last rate whose p99 TTFT meets 1 s
    assert knee_rate(rates, results, 0.05) is None
    assert knee_rate(rates, [run(100, 0), run(200, 0), run(400, 0), run(800, 0)], None) is None
    import perfmodel.cli.serve_command as serve_command
    import perfmodel.explore.api as explore_api

    for module in (serve_command, explore_api):  # neither keeps a knee of its own
        assert "def _knee" not in Path(module.__file__).read_text()


def test_spec_fields_are_merged_with_their_sources_and_where_they_are_written():
    from perfmodel.hardware.loader import full_load, resolve_spec, spec_fields

    fields = {item.field: item for item in spec_fields("h100-sxm-trtllm")}
    hardware = full_load(resolve_spec("h100-sxm-trtllm"))
    bandwidth = fields["memory.hbm.bandwidth"]
    assert bandwidth.source == hardware.field_sources["memory.hbm.bandwidth"] != ""
    assert Path(bandwidth.file).name == "h100-sxm.yaml" and bandwidth.line  # inherited through extends
    assert Path(fields["description"].file).name == "h100-sxm-trtllm.yaml"  # the overlay's own text
    assert not any(name.startswith(("sources", "notes", "alternatives", "extends")) for name in fields)
    assert api.spec_fields("h100-sxm-trtllm") == [(item.field, item.value) for item in fields.values()]


# --- in Chromium ---------------------------------------------------------------------------------------------

def _browser_or_reason() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (python -m pip install '.[dev]')"
    if chromium_path() is None:
        return "no Chromium executable (apt-get install chromium, or set PERFMODEL_CHROMIUM)"
    return None


@pytest.fixture(scope="module")
def page():
    reason = _browser_or_reason()
    if reason is not None:
        pytest.fail(f"browser tests cannot run: {reason}; .ci/run installs Chromium")
    from playwright.sync_api import sync_playwright

    with explore_server("--no-warm-up") as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path())
        page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(url)
        page.wait_for_selector("body[data-ready=true]", timeout=90_000)
        page.errors = errors  # type: ignore[attr-defined]
        yield page
        browser.close()
    assert not errors, errors


def _value(page, selector: str) -> float:
    return float(page.get_attribute(selector, "data-value"))


SI = {"P": 1e15, "T": 1e12, "G": 1e9, "M": 1e6, "k": 1e3, "": 1.0, "m": 1e-3, "µ": 1e-6, "n": 1e-9}


def _shown(page, selector: str) -> float:
    """The number as the page prints it (4 significant digits, an SI prefix)."""
    text = page.inner_text(selector).split(": ", 1)[-1]  # "spec: 1.247 ms (...)" or "1.247 ms"
    match = re.match(r"^\s*([-\d.e+]+)\s*([PTGMkmµn]?)", text)
    assert match, text
    return float(match.group(1)) * SI[match.group(2)]


def _settle(page, view: str, before: int) -> None:
    page.wait_for_function(f"(window.perfmodelExplore.redraws['{view}'] || {{count: 0}}).count > {before}",
                           timeout=60_000)


def _count(page, view: str) -> int:
    return page.evaluate(f"(window.perfmodelExplore.redraws['{view}'] || {{count: 0}}).count")


def _slide(page, selector: str, value: float) -> None:
    page.eval_on_selector(selector, f"(e) => {{ e.value = {value}; e.dispatchEvent(new Event('input')); }}")


def test_roofline_view_and_a_what_if_slider(page):
    page.click("button[data-view=roofline]")
    expected = api.roofline({"systems": ["h100-sxm", "tpu-v5e"], "workload": "transformer_block", "kind": "classic"})
    for index, chart in enumerate(expected["charts"]):
        assert _value(page, f"#rf-total-{index}") == pytest.approx(chart["total_s"], rel=1e-12)
        assert _shown(page, f"#rf-total-{index}") == pytest.approx(chart["total_s"], rel=1e-3)
    assert page.locator("#rf-charts .main-svg").count() >= 2
    assert page.locator("#rf-field").input_value() == "memory.hbm.bandwidth"
    before = _count(page, "roofline")
    _slide(page, "#rf-scale", -1)  # half the HBM bandwidth of the first system
    _settle(page, "roofline", before)
    halved = api.roofline({"systems": ["h100-sxm", "tpu-v5e"], "workload": "transformer_block", "kind": "classic",
                           "set": {"memory.hbm.bandwidth": api.scaled(
                               next(f["value"] for f in api.spec_numbers("h100-sxm-trtllm")
                                    if f["field"] == "memory.hbm.bandwidth"), 0.5)}})
    assert _value(page, "#rf-total-0") == pytest.approx(halved["charts"][0]["total_s"], rel=1e-9)
    assert halved["charts"][0]["total_s"] > expected["charts"][0]["total_s"]
    page.select_option("#rf-kind", "scheduling")
    page.select_option("#rf-workload", "llm:llama-2-7b:decode")
    page.wait_for_function("document.querySelector('#rf-summary').textContent.includes('decode')", timeout=60_000)
    assert "scheduling roofline" in page.inner_text("#rf-charts")


def test_llm_view_two_systems_side_by_side_follow_the_sliders(page):
    page.click("button[data-view=llm]")
    before = _count(page, "llm")
    _slide(page, "#llm-batch", 3)  # batch 2^3
    _settle(page, "llm", before)
    expected = api.llm({"model": "llama-2-7b", "systems": ["h100-sxm", "tpu-v5e"], "batch": 8, "prompt": 1024, "gen": 256})
    for index, result in enumerate(expected["results"]):
        for key in ("ttft_s", "tpot_s", "tokens_per_s", "memory_total_bytes"):
            assert _value(page, f"#llm-{key}-{index}") == pytest.approx(result[key], rel=1e-12), key
            assert _shown(page, f"#llm-{key}-{index}") == pytest.approx(result[key], rel=1e-3), key
        assert page.inner_text(f"#llm-bound-{index}") == (f"{result['bound_by_phase']['prefill']} / "
                                                          f"{result['bound_by_phase']['decode']}")
    assert "phase breakdown" in page.inner_text("#llm-phases")
    _check_intervals(page, expected)
    before = _count(page, "llm")
    _slide(page, "#llm-confidence", 95)
    _settle(page, "llm", before)
    wider = api.llm({"model": "llama-2-7b", "systems": ["h100-sxm", "tpu-v5e"], "batch": 8, "prompt": 1024, "gen": 256,
                     "confidence": 0.95})
    _check_intervals(page, wider)
    low80, high80 = expected["results"][0]["intervals"]["tpot_s"].values()
    low95, high95 = wider["results"][0]["intervals"]["tpot_s"].values()
    assert low95 <= low80 < high80 <= high95 and (low95, high95) != (low80, high80)
    assert "95% interval" in page.inner_text("#llm-table")


def _check_intervals(page, expected: dict) -> None:
    """Every headline figure's interval on the page equals the API's (and perfmodel llm's), and the basis."""
    from perfmodel.cli.confidence import SCENARIO_FIGURES

    for index, result in enumerate(expected["results"]):
        bands = result["intervals"]
        assert page.inner_text(f"#llm-basis-{index}") == bands["basis"]
        for key in SCENARIO_FIGURES:
            selector = f"#llm-{key}-{index}-interval"
            if bands[key]["low"] is None:
                assert page.inner_text(selector) == "no evidence", key
                continue
            assert float(page.get_attribute(selector, "data-low")) == pytest.approx(bands[key]["low"], rel=1e-12), key
            assert float(page.get_attribute(selector, "data-high")) == pytest.approx(bands[key]["high"], rel=1e-12), key
            assert bands[key]["low"] <= result[key] <= bands[key]["high"], key


def test_serving_view_load_latency_knee_and_a_sizing_export(page, tmp_path: Path):
    page.click("button[data-view=serving]")
    page.fill("#sv-rates", "1,4,16,64")
    page.fill("#sv-requests", "60")
    page.click("#sv-run")
    page.wait_for_selector("#sv-tps-3", timeout=120_000)
    expected = api.serving({"model": "llama-2-7b", "system": "h100-sxm", "tp": 1, "rates": "1,4,16,64",
                            "prompt_dist": "fixed:512", "output_dist": "fixed:128", "requests": 60})
    for index, result in enumerate(expected["results"]):
        assert _value(page, f"#sv-tps-{index}") == pytest.approx(result["tokens_per_s"], rel=1e-12)
        assert _value(page, f"#sv-ttft99-{index}") == pytest.approx(result["ttft_s"]["p99"], rel=1e-12)
    knee = expected["knee_rate_per_s"]
    assert page.get_attribute("#sv-knee", "data-value") == ("null" if knee is None else str(knee)) or (
        knee is not None and float(page.get_attribute("#sv-knee", "data-value")) == knee)
    page.select_option("#sz-systems", ["h100-sxm"])
    page.click("#sz-run")
    page.wait_for_selector("#sz-export-0", timeout=120_000)
    sized = api.size({"model": "llama-2-7b", "systems": ["h100-sxm"], "rate": 4, "ttft_slo": "1s", "tpot_slo": "50ms",
                      "prompt_dist": "fixed:512", "output_dist": "fixed:128"})
    assert _value(page, "#sz-chips-0") == sized["systems"][0]["best"]["chips"]
    assert _value(page, "#sz-held-0") == pytest.approx(sized["systems"][0]["confidence"]["limit_factor"], rel=1e-12)
    assert sized["systems"][0]["confidence"]["basis"] in page.inner_text("#sz-held-0")
    with page.expect_download() as download:
        page.click("#sz-export-0")
    saved = tmp_path / "deployment.json"
    download.value.save_as(saved)
    exported = json.loads(saved.read_text())
    assert exported["best"]["chips"] == sized["systems"][0]["best"]["chips"]
    assert exported["best"]["tokens_per_s"] == pytest.approx(sized["systems"][0]["best"]["tokens_per_s"], rel=1e-12)


def test_serving_view_pareto_front_slo_region_and_launch_export(page, tmp_path: Path):
    page.click("button[data-view=serving]")
    page.fill("#pf-chips", "8")
    page.fill("#pf-ttft", "1s")
    # a TPOT target inside the front's range (2.6-12.8 ms per token for this search), so the region splits it
    page.fill("#pf-tpot", "8ms")
    page.click("#pf-run")
    page.wait_for_selector("#pf-user-0", timeout=120_000)
    inputs = {"model": "llama-2-7b", "system": "h100-sxm", "chips": 8, "prompt": 1024, "output": 256,
              "ttft_slo": "1s", "tpot_slo": "8ms", "disagg": True}
    expected = api.search(inputs)
    front = expected["front"]
    assert page.locator("#pf-table tr").count() == len(front) + 1
    for index, point in enumerate(front):
        assert _value(page, f"#pf-user-{index}") == pytest.approx(point["tokens_per_s_per_user"], rel=1e-12)
        assert _value(page, f"#pf-chip-{index}") == pytest.approx(point["tokens_per_s_per_chip"], rel=1e-12)
        assert page.inner_text(f"#pf-slo-{index}") == ("yes" if point["meets_slo"] else "no")
    assert any(p["meets_slo"] for p in front) and not all(p["meets_slo"] for p in front)  # the region splits the front
    assert page.get_attribute("#pf-summary", "data-value") == str(expected["chosen"])
    # the chart: every configuration, the front, the chosen point and the SLO region (x >= 1 / TPOT target)
    drawn = page.evaluate("(() => { const c = document.querySelector('#pf-chart'); return {"
                          "traces: c.data.map((t) => [t.name, t.x.length]), shapes: c.layout.shapes.map((s) => s.x0)}; })()")
    assert drawn["traces"][:3] == [["configurations tried", expected["configurations"]], ["Pareto front", len(front)],
                                   ["chosen", 1]]
    assert drawn["shapes"][0] == pytest.approx(1 / 0.008, rel=1e-12)
    pick = next(index + 1 for index, p in enumerate(front) if not p["meets_slo"])  # any point may be exported
    page.select_option("#pf-pick", str(pick))
    page.select_option("#pf-engine", "sglang")
    with page.expect_download() as download:
        page.click("#pf-export")
    saved = tmp_path / "launch.sh"
    download.value.save_as(saved)
    launch = api.search({**inputs, "pick": pick, "export": "sglang"})["launch"]
    assert saved.read_text() == launch["text"] + "\n"
    assert "python -m sglang.launch_server" in saved.read_text()
    assert page.inner_text("#pf-launch") == launch["text"]
    point = front[pick - 1]
    assert f"--tp-size {point['tp']}" in launch["text"]


def _small_validation_table(path: Path) -> Path:
    """Two published measurements of each group of the shipped table (the same columns), so the
    accuracy view's numbers are checked without pricing all ~150 rows twice."""
    import csv

    from perfmodel.validation import default_csv

    with default_csv().open(newline="", encoding="utf-8") as stream:
        reader = csv.DictReader(stream)
        rows, taken = [], {}
        for row in reader:
            if taken.get(row["group"], 0) < 2:
                taken[row["group"]] = taken.get(row["group"], 0) + 1
                rows.append(row)
        fields = reader.fieldnames
    with path.open("w", newline="", encoding="utf-8") as stream:
        writer = csv.DictWriter(stream, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_specs_and_accuracy_view(page, tmp_path: Path):
    from perfmodel.validation import summary, validate

    page.click("button[data-view=specs]")
    page.select_option("#sp-system", "tpu-v5e")
    page.wait_for_function("document.querySelector('#sp-title').textContent.startsWith('tpu-v5e:')", timeout=30_000)
    expected = api.specs({"system": "tpu-v5e"})
    rows = page.locator("#sp-table tr")
    assert rows.count() == len(expected["fields"]) + 1
    bandwidth = next(i for i, f in enumerate(expected["fields"]) if f["field"] == "memory.hbm.bandwidth")
    assert page.inner_text(f"#sp-value-{bandwidth}") == str(expected["fields"][bandwidth]["value"])
    assert page.inner_text(f"#sp-written-{bandwidth}") == expected["fields"][bandwidth]["written"]
    assert expected["fields"][bandwidth]["url"] in page.inner_text("#sp-table")
    table = _small_validation_table(tmp_path / "measurements.csv")
    page.fill("#va-csv", str(table))
    page.click("#va-load")
    rows_now = validate(table)
    totals = summary(rows_now)
    page.wait_for_selector("#va-error-0", timeout=120_000)
    assert float(page.get_attribute("#va-summary", "data-value")) == pytest.approx(totals["all"], rel=1e-12)
    predicted = [row for row in rows_now if row.predicted is not None]
    assert len({row.group for row in predicted}) >= 5  # the small table still spans the groups
    assert page.locator("#va-table tr").count() == len(predicted) + 1
    for index, row in enumerate(predicted):
        assert _value(page, f"#va-predicted-{index}") == pytest.approx(row.predicted, rel=1e-12)
        assert int(page.inner_text(f"#va-line-{index}")) == row.line
    assert not math.isnan(totals["all"])
