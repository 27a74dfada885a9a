"""Installing where users are (issue 40 item 7): pyproject.toml gives ranges (torch>=2.4) and puts numba and Ray in
the extras `fast` and `sweep`; without them `attnlab.trace` runs on the pure-torch path and says so
(`Trace.host_kernels`), and `attnlab sweep` refuses in one line. numba and Ray are hidden from a fresh interpreter by a
meta-path finder, as if they were not installed. The wheel itself is checked by `make wheel-check` (it downloads, so
it is not part of `make test`; docs/install.md)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.numerics import assert_close

ROOT = Path(__file__).resolve().parents[2]
BLOCKED = ("numba", "llvmlite", "ray")
# Run first in the child: `import numba` / `import ray` (and their submodules) fail as when they are not installed.
HIDE = f"""
import importlib.abc, sys
class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _NotInstalled())
"""
# A tiny random Llama with a massive entry planted in the embeddings (so the stream statistics have one to find).
TRACE = """
import sys, numpy as np, torch
import attnlab
from tests.real.families import tiny_family
model = tiny_family("llama", num_key_value_heads=2)
with torch.no_grad():
    model.get_input_embeddings().weight[5, 3] = 400.0
ids = torch.randint(6, model.config.vocab_size, (2, 40), generator=torch.Generator().manual_seed(1))
ids[:, 0] = 5
tr = attnlab.trace(model, ids)
"""
FIELDS = ("logit_key0", "logit_rest", "attn_key0_by_query", "resid_norm", "median_abs", "max_abs", "value_norm")


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")


def _run(code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_dependencies_are_ranges_that_keep_a_users_torch():
    """No exact pin among the dependencies; torch's range admits 2.4 and the lock's 2.13.0 (and a later CUDA
    build's local version); numba and Ray only in their extras."""
    reqs = {Requirement(r).name: Requirement(r) for r in _project()["dependencies"]}
    assert not [str(r) for r in reqs.values() if "==" in str(r.specifier)], "pyproject pins an exact version"
    for version in ("2.4.0", "2.13.0", "2.14.1+cu130"):
        assert reqs["torch"].specifier.contains(Version(version)), version
    assert not reqs["torch"].specifier.contains(Version("2.3.1"))
    assert "numba" not in reqs and "ray" not in reqs
    extras = _project()["optional-dependencies"]
    assert [Requirement(r).name for r in extras["fast"]] == ["numba"]
    assert [Requirement(r).name for r in extras["sweep"]] == ["ray"]


def test_a_run_manifest_names_the_extras_installed():
    """A run folder's manifest.json lists numba's and Ray's versions where they are installed, and omits them where
    not (the cpu statistics' path then was torch's)."""
    from importlib.metadata import version

    from attnlab.runs import environment_manifest

    manifest = environment_manifest()
    for package in ("numba", "ray"):
        if importlib.util.find_spec(package) is not None:
            assert manifest[package] == version(package)
        else:
            assert package not in manifest


def test_the_lock_and_make_keep_exact_versions():
    lock = (ROOT / "constraints.txt").read_text()
    for name in ("torch==2.13.0", "numba==", "ray=="):
        assert re.search(rf"^{re.escape(name)}", lock, re.M), name
    make = (ROOT / "Makefile").read_text()
    assert "-c $(LOCK) torch==2.13.0" in make and "-c $(LOCK) -e '.[test,fast,sweep,lens]'" in make


def test_readme_starts_python_with_pip_install_and_trace():
    """The README's first code block under "From Python" is `pip install attnlab`, and its first Python block calls
    `attnlab.trace` (the doc test runs it; `pip` lines are not attnlab commands, so the parser test skips them)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## From Python") :]
    first_block = re.search(r"```(\w+)\n(.*?)```", section, re.S)
    assert first_block and first_block.group(1) == "bash" and "pip install attnlab" in first_block.group(2)
    first_python = re.search(r"```python\n(.*?)```", text, re.S)
    assert first_python and "attnlab.trace(" in first_python.group(1)


@pytest.mark.numerics
def test_trace_without_numba_or_ray_takes_the_torch_path_with_the_same_numbers(tmp_path):
    """In an interpreter where numba and Ray cannot be imported, `import attnlab; attnlab.trace(...)` runs, reports
    `host_kernels == "torch"`, imports neither, and gives the statistics of the numba path here."""
    pytest.importorskip("numba")
    out = tmp_path / "no-numba"
    report = f"tr.save({str(out)!r}); print(tr.host_kernels, [m for m in {BLOCKED!r} if m in sys.modules])"
    child = _run(HIDE + TRACE + report, tmp_path)
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.split("\n")[-2] == "torch []", child.stdout
    import attnlab

    scope: dict = {}
    exec(TRACE, scope)  # the same model and ids here, where numba is installed
    fast, ref = scope["tr"], attnlab.load_trace(out)
    assert fast.host_kernels == "numba" and ref.host_kernels == "torch"
    for name in FIELDS:
        # Whole float32 forwards, numba's fused reductions against torch/numpy's: the bound of
        # tests/real/test_cpu_kernels.py (observed 172x inside it over the numerics matrix).
        assert_close(getattr(ref, name), getattr(fast, name), rtol=1e-5, atol=1e-6, label=f"no numba {name}",
                     kind="observed")  # fmt: skip
    assert np.array_equal(fast.max_pos, ref.max_pos) and np.array_equal(fast.max_dim, ref.max_dim)
    where = [_where(t.massive) for t in (fast, ref)]
    assert where[0] == where[1] and where[0], "the same massive entries (the planted one at least)"


def _where(massive) -> list[tuple[int, int, int]]:
    """(layer, pos, dim) of each massive entry (`Trace.massive`: a DataFrame, or a list of dicts before issue 40)."""
    rows = massive.to_dict("records") if hasattr(massive, "to_dict") else massive
    return [(int(r["layer"]), int(r["pos"]), int(r["dim"])) for r in rows]


def test_sweep_without_ray_refuses_in_one_line_before_any_folder(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text('command = "consensus simulate"\n[base]\nn = 8\n[grid]\nseed = [0, 1]\n')
    out = tmp_path / "sweep"
    child = _run(HIDE + "import sys; from attnlab.cli import main; sys.exit(main(sys.argv[1:]))", tmp_path, "sweep",
                 str(spec), "--out", str(out))  # fmt: skip
    assert child.returncode != 0
    lines = [line for line in child.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "pip install 'attnlab[sweep]'" in lines[0], child.stderr
    assert not out.exists()
