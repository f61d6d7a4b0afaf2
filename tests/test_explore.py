"""``perfmodel explore``: the JSON API and, in a real browser (Playwright driving Debian's Chromium),
each view's numbers against the engine's own API for the same inputs (issue 33).

Without Chromium or Playwright the browser tests fail under CI (``CI`` set: ``.ci/run`` installs
Chromium, so a missing browser is a broken set-up) and are skipped with the reason elsewhere (a
developer's machine without ``apt-get install chromium``)."""

from __future__ import annotations

import json
import math
import os
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


def test_what_if_values_keep_their_unit():
    assert api.scaled("3.35 TB/s", 2) == "6.7 TB/s"
    assert api.scaled("132", 2) == "264"
    fields = {f["field"]: f for f in api.spec_numbers("h100-sxm")}
    assert fields["memory.hbm.bandwidth"]["unit"] == "TB/s"


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
        if os.environ.get("CI"):
            pytest.fail(f"browser tests cannot run under CI: {reason}; .ci/run installs Chromium")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with explore_server() as url, sync_playwright() as playwright:
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
    with page.expect_download() as download:
        page.click("#sz-export-0")
    saved = tmp_path / "deployment.json"
    download.value.save_as(saved)
    exported = json.loads(saved.read_text())
    assert exported["best"]["chips"] == sized["systems"][0]["best"]["chips"]
    assert exported["best"]["tokens_per_s"] == pytest.approx(sized["systems"][0]["best"]["tokens_per_s"], rel=1e-12)


def test_specs_and_accuracy_view(page):
    from perfmodel.validation import summary, validate

    page.click("button[data-view=specs]")
    page.select_option("#sp-system", "tpu-v5e")
    page.wait_for_function("document.querySelector('#sp-title').textContent.startsWith('tpu-v5e:')", timeout=30_000)
    expected = api.specs({"system": "tpu-v5e"})
    rows = page.locator("#sp-table tr")
    assert rows.count() == len(expected["fields"]) + 1
    bandwidth = next(i for i, f in enumerate(expected["fields"]) if f["field"] == "memory.hbm.bandwidth")
    assert page.inner_text(f"#sp-value-{bandwidth}") == str(expected["fields"][bandwidth]["value"])
    assert expected["fields"][bandwidth]["url"] in page.inner_text("#sp-table")
    page.click("#va-load")
    rows_now = validate()
    totals = summary(rows_now)
    page.wait_for_selector("#va-error-0", timeout=120_000)
    assert float(page.get_attribute("#va-summary", "data-value")) == pytest.approx(totals["all"], rel=1e-12)
    predicted = [row for row in rows_now if row.predicted is not None]
    assert page.locator("#va-table tr").count() == len(predicted) + 1
    for index in (0, len(predicted) // 2, len(predicted) - 1):
        assert _value(page, f"#va-predicted-{index}") == pytest.approx(predicted[index].predicted, rel=1e-12)
        assert int(page.inner_text(f"#va-line-{index}")) == predicted[index].line
    assert not math.isnan(totals["all"])
