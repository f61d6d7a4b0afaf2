"""How long ``perfmodel explore`` takes to redraw after a slider move, in Chromium; and a screenshot of
each view for the documentation site (issue 33: under 300 ms for an LLM view).

A redraw is timed inside the page (``performance.now()``): from the slider's ``input`` event to the
table filled and both Plotly charts drawn, the JSON request to the engine included. The slider is moved
to each of its positions in turn, ``--rounds`` times; the first move is dropped (plotly's first draw).
Run: ``python benchmarks/explore_redraw.py`` (needs Chromium and the dev extras; writes
``benchmarks/results/explore_redraw.json`` and ``perfmodel/docs/pages/img/explore-*.png``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from perfmodel.explore.harness import chromium_path, explore_server  # noqa: E402

IMAGES = HERE.parent / "perfmodel" / "docs" / "pages" / "img"
SLIDERS = {"llm": ("#llm-batch", range(0, 10)), "roofline": ("#rf-scale", [x / 4 for x in range(-8, 9)])}


def moves(page, view: str, selector: str, positions, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        for value in positions:
            before = page.evaluate(f"(window.perfmodelExplore.redraws['{view}'] || {{count: 0}}).count")
            page.eval_on_selector(selector, f"(e) => {{ e.value = {value}; e.dispatchEvent(new Event('input')); }}")
            page.wait_for_function(f"window.perfmodelExplore.redraws['{view}'].count > {before}", timeout=60_000)
            times.append(page.evaluate(f"window.perfmodelExplore.redraws['{view}'].ms.at(-1)"))
    return times[1:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=str(HERE / "results" / "explore_redraw.json"))
    ap.add_argument("--no-screenshots", action="store_true")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    if executable is None:
        raise SystemExit("no Chromium: apt-get install chromium (or set PERFMODEL_CHROMIUM)")
    rows = {}
    load_before = os.getloadavg()
    with explore_server("--no-warm-up") as url, sync_playwright() as playwright:  # no background validation
        browser = playwright.chromium.launch(executable_path=executable)
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.goto(url)
        page.wait_for_selector("body[data-ready=true]", timeout=90_000)
        for view, (selector, positions) in SLIDERS.items():
            page.click(f"button[data-view={view}]")
            times = moves(page, view, selector, list(positions), args.rounds)
            rows[view] = {"slider": selector, "moves": len(times), "median_ms": statistics.median(times),
                          "p90_ms": sorted(times)[int(0.9 * (len(times) - 1))], "max_ms": max(times)}
        load_after = os.getloadavg()
        if not args.no_screenshots:
            IMAGES.mkdir(parents=True, exist_ok=True)
            page.click("button[data-view=roofline]")
            page.eval_on_selector("#rf-scale", "(e) => { e.value = 0; e.dispatchEvent(new Event('input')); }")
            page.wait_for_timeout(1500)
            page.screenshot(path=str(IMAGES / "explore-roofline.png"))
            page.click("button[data-view=llm]")
            page.eval_on_selector("#llm-batch", "(e) => { e.value = 4; e.dispatchEvent(new Event('input')); }")
            page.wait_for_timeout(1500)
            page.screenshot(path=str(IMAGES / "explore-llm.png"))
            page.click("button[data-view=serving]")
            page.click("#sv-run")
            page.wait_for_selector("#sv-tps-0", timeout=120_000)
            page.click("#sz-run")
            page.wait_for_selector("#sz-table tr:nth-child(2)", timeout=120_000)
            page.click("#pf-run")
            page.wait_for_selector("#pf-user-0", timeout=120_000)
            page.wait_for_timeout(500)
            page.screenshot(path=str(IMAGES / "explore-serving.png"), full_page=True)
            page.click("button[data-view=specs]")
            page.click("#va-load")
            page.wait_for_selector("#va-error-0", timeout=180_000)
            page.screenshot(path=str(IMAGES / "explore-specs.png"))
        browser.close()
    print(f"load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after the moves; {os.cpu_count()} CPUs")
    print("| view | slider | moves | median | p90 | max |")
    print("|---|---|---:|---:|---:|---:|")
    for view, r in rows.items():
        print(f"| {view} | `{r['slider']}` | {r['moves']} | {r['median_ms']:.0f} ms | {r['p90_ms']:.0f} ms | "
              f"{r['max_ms']:.0f} ms |")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_suffix(".json.tmp")
    temporary.write_text(json.dumps({"chromium": executable, "rounds": args.rounds, "views": rows,
                                     "load_average_1min": {"before": load_before[0], "after": load_after[0]},
                                     "cpus": os.cpu_count()}, indent=2) + "\n")
    temporary.replace(out)


if __name__ == "__main__":
    main()
