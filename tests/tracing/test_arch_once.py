"""Issue 38: the architecture is discovered once a trace session (`get_arch` walks the module tree), held on the
session and handed to what needs it: one walk for `trace_windows` (recorder and session), one for
`check_traceable`."""

from __future__ import annotations

import torch

from attnlab.tracing.adapters import arch as arch_module
from attnlab.tracing.adapters import hf
from tests.real.families import tiny_family


def _counted(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = arch_module.get_arch

    def counting(model):
        calls.append(1)
        return real(model)

    monkeypatch.setattr(hf, "get_arch", counting)
    return calls


def test_trace_windows_discovers_the_architecture_once(monkeypatch):
    model = tiny_family("llama")
    ids = torch.randint(0, 16, (3, 8))
    calls = _counted(monkeypatch)
    hf.trace_windows(model, ids, batch_size=2, desc="")
    assert len(calls) == 1


def test_check_traceable_discovers_the_architecture_once(monkeypatch):
    model = tiny_family("llama")
    calls = _counted(monkeypatch)
    hf.check_traceable(model)
    assert len(calls) == 1


def test_a_scan_discovers_the_architecture_once(monkeypatch, tmp_path):
    """A whole scan of two domains (load check, traceability check, shape checks, every domain's windows and the
    kept patterns) walks the module tree once: `load_checked` discovers it and hands it on (it walked 4 times before
    the first window and once more per domain before issue 38)."""
    from attnlab.scan import ScanConfig, scan
    from tests.real.conftest import save_tiny_hf_folder

    folder = save_tiny_hf_folder(tmp_path / "m", "llama")
    calls: list[int] = []
    real = arch_module.get_arch

    def counting(model):
        calls.append(1)
        return real(model)

    monkeypatch.setattr(hf, "get_arch", counting)
    monkeypatch.setattr(arch_module, "get_arch", counting)
    config = ScanConfig(model=str(folder), domains=("prose", "code"), samples=2, tokens=16, pattern_heads=((0, 0),))
    scan(config, tmp_path / "run")
    assert len(calls) == 1
