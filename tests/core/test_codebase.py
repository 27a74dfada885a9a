"""Habits that keep the code one design: lint, format, types, short functions, no hidden global state."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "attnlab"
MAX_FUNCTION_LINES = 60
MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "WeakKeyDictionary", "WeakValueDictionary", "OrderedDict"}


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_check_is_clean():
    out = _tool("ruff", "check", "attnlab", "tests", "benchmarks")
    assert out.returncode == 0, out.stdout[-3000:]


def test_ruff_format_is_clean():
    out = _tool("ruff", "format", "--check", "attnlab", "tests", "benchmarks")
    assert out.returncode == 0, out.stdout[-3000:]


@pytest.mark.slow
def test_mypy_is_clean():
    out = _tool("mypy", "--no-error-summary", "attnlab")
    assert out.returncode == 0, out.stdout[-3000:]


def test_functions_are_short():
    long = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, "\n".join(long)


def test_thread_count_is_set_only_by_the_cli_helper():
    users = [str(p.relative_to(ROOT)) for p in _sources() if "set_num_threads" in p.read_text()]
    assert users == ["attnlab/clitools.py"]


def _is_mutable(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name in MUTABLE_CALLS
    return False


def test_no_module_level_mutable_state():
    """Module-level containers must be UPPER_CASE constants; `global` is never used; no import-time side effects."""
    found = []
    for path in _sources():
        tree = ast.parse(path.read_text())
        for node in tree.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            for t in targets:
                name = getattr(t, "id", "")
                if name.startswith("__"):
                    continue
                if _is_mutable(node.value) and not (name.isupper() and not name.startswith("_")):  # type: ignore[attr-defined]
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
        found += [f"{path.relative_to(ROOT)}:{n.lineno} global" for n in ast.walk(tree) if isinstance(n, ast.Global)]
        text = path.read_text()
        found += [
            f"{path.relative_to(ROOT)}: {bad}"
            for bad in ("matplotlib.use(", "torch.manual_seed(", "np.random.seed(", "os.environ.setdefault(")
            if bad in text and path.name != "clitools.py" and not (bad == "torch.manual_seed(" and "fork_rng(" in text)
        ]
    assert not found, "\n".join(found)


def test_run_functions_are_not_shadowed_by_modules():
    """`attnlab.<study>.<fn>` stays the run function after every submodule of the study is imported (a module
    named like a run function would replace it as the package attribute)."""
    import importlib
    import pkgutil

    from attnlab.registry import STUDY_PACKAGES

    for package_name in STUDY_PACKAGES.values():
        package = importlib.import_module(package_name)
        for info in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package_name}.{info.name}")
        runners = importlib.import_module(f"{package_name}.run").RUNNERS
        for _, fn in runners.values():
            exported = getattr(package, fn.__name__, fn)
            assert callable(exported) and not isinstance(exported, type(package)), f"{package_name}.{fn.__name__}"
