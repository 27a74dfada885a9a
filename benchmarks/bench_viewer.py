"""How responsive the scan report's attention view is at long windows (issue 21: "canvas rendering that stays
responsive at 2,048 tokens"), measured in the headless system Chromium that the browser tests use.

A tiny random Llama (2 layers, 4 heads, byte-level tokenizer, positions up to 4,096) is scanned on one window of
`--tokens` tokens with `--heads` patterns of layer 0 saved, so the page holds [T, T] patterns as the real scan writes
them. Measured in the page (performance.now(), the main thread's long tasks from PerformanceObserver):
- load: navigation start to the first head's pattern drawn on its canvas (the page shows one head on load);
- click: a head button pressed to its pattern redrawn (the synchronous handler: layout, T^2 pixels);
- hover: the handler of one mousemove over the canvas (the tip line naming query, key and weight), mean and max
  over 200 moves;
- layer: "all heads of this layer" to every saved head drawn as a small multiple;
- the longest main-thread task of the click, hover and layer steps (what a user feels as a freeze).

    PYTHONPATH=. python benchmarks/bench_viewer.py --tokens 2048 --out /tmp/viewer-bench
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# long tasks from now on (not the page load's): their durations collect in window.__long
OBSERVE_JS = """() => { window.__long = []; var since = performance.now(); new PerformanceObserver(function (list) {
  list.getEntries().forEach(function (e) { if (e.startTime >= since) window.__long.push(e.duration); }); })
  .observe({type: 'longtask'}); }"""


def tiny_model(folder: Path, positions: int) -> Path:
    """A tiny random Llama with a byte-level tokenizer (as the tests' tiny models) and `positions` positions."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.real.conftest import byte_level_tokenizer

    tok, vocab = byte_level_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=positions, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )  # fmt: skip
    LlamaForCausalLM(cfg).save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


def scan_run(out: Path, tokens: int, heads: int) -> Path:
    from attnlab.core.clitools import threads
    from attnlab.scan import ScanConfig, scan

    model = tiny_model(out / "model", max(4096, tokens))
    cfg = ScanConfig(
        model=str(model), domains=("prose",), tokens=tokens, samples=1, n_auto_pattern_heads=0,
        pattern_heads=tuple((0, h) for h in range(heads)),
    )  # fmt: skip
    with threads(1):
        return scan(cfg, out / "scan").path


def measure(report: Path, moves: int = 200) -> dict:
    """The timings (ms) of the module docstring, from one page of a fresh headless Chromium."""
    from attnlab.reports.page import element_id
    from tests.browser import launch_browser

    view = element_id(report.parent, "pattern")
    with launch_browser() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        t0 = time.perf_counter()
        page.goto(report.resolve().as_uri(), timeout=600_000)
        page.wait_for_function(f"document.querySelector('#{view} canvas[data-drawn]')", timeout=600_000)
        out: dict = {"load_ms": round(page.evaluate("performance.now()")), "wall_load_s": time.perf_counter() - t0}
        page.evaluate(OBSERVE_JS)
        out["click_ms"] = page.evaluate(
            """(view) => { var b = document.querySelectorAll('button.head'), t = performance.now();
            b[b.length - 1].click(); return performance.now() - t; }""",
            view,
        )
        hover = page.evaluate(
            """([view, n]) => { var c = document.querySelector('#' + view + ' canvas'), r = c.getBoundingClientRect();
            var times = [];
            for (var k = 0; k < n; k++) { var t = performance.now();
              c.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + (k * 37 % r.width),
                clientY: r.top + (k * 53 % r.height), bubbles: true}));
              times.push(performance.now() - t); }
            return [times.reduce(function (a, b) { return a + b; }, 0) / n, Math.max.apply(null, times),
                    document.querySelector('#' + view + ' .tip').textContent]; }""",
            [view, moves],
        )
        out["hover_mean_ms"], out["hover_max_ms"], out["hover_tip"] = hover
        out["layer_ms"] = page.evaluate(
            """(view) => { var t = performance.now(); document.getElementById(view + '-layer').click();
            var drawn = document.querySelectorAll('#' + view + '-layer-view canvas[data-drawn]').length;
            return [performance.now() - t, drawn]; }""",
            view,
        )
        page.wait_for_timeout(1000)  # let the observer deliver the last long tasks
        out["longest_task_ms"] = page.evaluate("Math.max.apply(null, window.__long.concat([0]))")
        out["errors"] = errors
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=2, help="saved patterns of layer 0 (default 2)")
    parser.add_argument("--out", type=Path, required=True, help="folder of the model and the scan run (reused)")
    parser.add_argument("--repeats", type=int, default=1, help="pages measured (a fresh browser each)")
    args = parser.parse_args()
    run = (
        args.out / "scan"
        if (args.out / "scan" / "report.html").is_file()
        else scan_run(args.out, args.tokens, args.heads)
    )
    size = (run / "report.html").stat().st_size
    for _ in range(args.repeats):
        result = {"report_mb": round(size / 2**20, 1), **measure(run / "report.html")}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
