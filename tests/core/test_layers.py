"""The tree shows the design (issue 38): shared layers are packages, imports run down the layers only, no study
imports another, and `attnlab/` holds at most six loose modules (docs/design.md, "Layout").

Each check reads the source with `ast` (no import), so it sees lazy imports inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from attnlab.core.registry import ROOMS

PACKAGE = Path(__file__).resolve().parents[2] / "attnlab"
# the shared layers, bottom (0) to top: a layer imports only layers of a lower rank (docs/design.md's drawing)
LAYER_RANK = {"errors": 0, "core": 1, "runs": 2, "reports": 3, "training": 3, "toy": 3, "tracing": 4, "hf": 5}
# the loose modules at the top of attnlab/ (demo.py is the sixth, argued in docs/design.md)
LOOSE = {"__init__", "__main__", "cli", "api", "errors", "demo"}
# packages of a study that are not a command room: attnlab/real/ holds the real-models study's reproduction
STUDY_PACKAGES = {"real": "real"}


def _top(path: Path) -> str:
    """The first part of a module's path under attnlab/ (`runs` for attnlab/runs/io.py, `api` for api.py)."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _imported_tops(path: Path) -> set[str]:
    """The first parts of every `attnlab.<x>` this module imports (at the top or inside a function)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] == "attnlab":
                found |= {a.name for a in node.names} if len(parts) == 1 else {parts[1]}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("attnlab.")}
    return found


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _study_of() -> dict[str, str]:
    """Package under attnlab/ -> the spec study it belongs to (command rooms from the registry, plus real/)."""
    return {**{r.command: r.study for r in ROOMS if r.study is not None}, **STUDY_PACKAGES}


def test_the_shared_layers_are_packages() -> None:
    for layer in LAYER_RANK:
        if layer != "errors":
            assert (PACKAGE / layer / "__init__.py").is_file(), f"attnlab/{layer}/ is not a package"
            assert ast.get_docstring(ast.parse((PACKAGE / layer / "__init__.py").read_text())), f"{layer} says nothing"
    loose = {p.stem for p in PACKAGE.glob("*.py")}
    assert loose == LOOSE, f"loose modules at the top of attnlab/: {sorted(loose - LOOSE)} beyond {sorted(LOOSE)}"


def test_demo_is_argued_as_the_sixth_loose_module() -> None:
    design = (PACKAGE.parent / "docs" / "design.md").read_text()
    assert "`demo.py` is the sixth" in design


def test_no_layer_imports_up() -> None:
    wrong = []
    for path in _modules():
        layer = _top(path)
        if layer not in LAYER_RANK:
            continue
        for target in _imported_tops(path) - {layer}:
            if LAYER_RANK.get(target, 99) >= LAYER_RANK[layer]:
                wrong.append(f"{path.relative_to(PACKAGE.parent)} (layer {layer}) imports attnlab.{target}")
    assert not wrong, wrong


def test_no_study_imports_another_study_or_a_tool_room() -> None:
    study_of = _study_of()
    tools = {r.command for r in ROOMS if r.study is None}
    wrong = []
    for path in _modules():
        study = study_of.get(_top(path))
        if study is None:
            continue
        for target in _imported_tops(path):
            if (target in study_of and study_of[target] != study) or target in tools or target in LOOSE - {"errors"}:
                wrong.append(f"{path.relative_to(PACKAGE.parent)} (study {study}) imports attnlab.{target}")
    assert not wrong, wrong


@pytest.mark.parametrize(
    ("source", "imports"),
    [("from attnlab.scan.series import onset", {"scan"}), ("import attnlab.runs.io", {"runs"}),
     ("from attnlab import tracing, errors", {"tracing", "errors"}), ("from . import x", set())],
)  # fmt: skip
def test_the_import_reader_sees_every_form(tmp_path: Path, source: str, imports: set[str]) -> None:
    """The checks above are only as good as this reader: it must see `from attnlab.x.y`, `import attnlab.x` and
    `from attnlab import x`, and ignore relative imports (attnlab uses none)."""
    path = tmp_path / "m.py"
    path.write_text(f"def f():\n    {source}\n")
    assert _imported_tops(path) == imports
