"""Habits that keep the code one design: lint, format, types, short functions, no hidden global state."""

from __future__ import annotations

import ast
import re
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
    assert users == ["attnlab/core/clitools.py"]


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

    from attnlab.core.registry import STUDY_PACKAGES

    for package_name in STUDY_PACKAGES.values():
        package = importlib.import_module(package_name)
        for info in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package_name}.{info.name}")
        runners = importlib.import_module(f"{package_name}.run").RUNNERS
        for _, fn in runners.values():
            exported = getattr(package, fn.__name__, fn)
            assert callable(exported) and not isinstance(exported, type(package)), f"{package_name}.{fn.__name__}"


def _runtime_imports(tree: ast.Module) -> list[str]:
    """attnlab modules imported at run time (imports under `if TYPE_CHECKING:` are annotations only)."""
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)}  # fmt: skip
    found = []
    for n in ast.walk(tree):
        if id(n) in skip:
            continue
        if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("attnlab."):
            found.append(n.module)
        elif isinstance(n, ast.Import):
            found += [a.name for a in n.names if a.name.startswith("attnlab.")]
    return found


def _package_graph() -> dict[str, set[str]]:
    """{top-level attnlab package or module: the others it imports at run time}."""
    edges: dict[str, set[str]] = {}
    for path in _sources():
        parts = path.relative_to(PACKAGE).parts
        src = parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")
        for module in _runtime_imports(ast.parse(path.read_text())):
            dst = module.split(".")[1]
            if dst != src:
                edges.setdefault(src, set()).add(dst)
    return edges


def test_packages_import_in_one_direction():
    """No cycle between attnlab's packages (issue 19: `hf/` and `tracing/` import in one direction only)."""
    edges = _package_graph()

    def reaches(a: str, b: str, seen: set[str]) -> bool:
        return any(n == b or (n not in seen and reaches(n, b, seen | {n})) for n in edges.get(a, ()))

    cycles = sorted(f"{a} <-> {b}" for a in edges for b in edges[a] if a < b and reaches(b, a, {b}))
    assert not cycles, cycles
    assert "hf" not in edges.get("tracing", set())


def test_recorder_internals_are_read_only_inside_tracing():
    """Studies extend the recorder through its public extension point, never through its private fields."""
    recorder = (PACKAGE / "tracing" / "recorder.py").read_text()
    private = {n.attr for n in ast.walk(ast.parse(recorder)) if isinstance(n, ast.Attribute) and n.attr.startswith("_")
               and not n.attr.startswith("__")}  # fmt: skip
    found = []
    for path in _sources():
        if "tracing" in path.relative_to(PACKAGE).parts[:1]:
            continue
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Attribute) and n.attr in private:
                found.append(f"{path.relative_to(ROOT)}:{n.lineno} .{n.attr}")
    assert not found, found


def test_hooks_are_installed_only_by_the_trace_adapters():
    """`register_forward_hook` / `register_forward_pre_hook` appear only under attnlab/tracing/adapters/ (issue 19)."""
    adapters = PACKAGE / "tracing" / "adapters"
    found = [
        f"{path.relative_to(ROOT)}:{n.lineno}"
        for path in _sources()
        if adapters not in path.parents
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.Attribute) and n.attr.startswith("register_forward")
    ]
    assert not found, found


# --- issue 20: every figure in the room's figures.py, one report entry per room ---------------------------------
# Rooms whose report.py and figures.py have the one shape of issue 20.
DRAWING_ROOMS = ("bb", "series", "scan", "ablate", "consensus", "sweep", "compare", "deploy", "view", "paths")
REPORT_ROOMS = ("bb", "series", "scan", "ablate", "consensus", "sweep", "compare", "deploy", "paths")  # view: none
DRAWING_CALLS = {"save_figure", "savefig", "new_figure", "make_subplots", "Figure"}  # matplotlib and plotly
PLOTLY_JSON_BUILDERS = {"heatmap", "lines", "with_slider"}  # attnlab.reports.page's helpers that build plotly JSON
DRAWING_MODULES = ("matplotlib", "plotly.express", "plotly.graph_objects", "plotly.subplots")  # not plotly.offline (js)


# modules besides run.py and report.py that may call figures.py: the verdicts' run_R12 and run_S6 are run functions,
# and a repro/runs.py experiment may draw a figure across its runs; compare's page.py builds the report's page (and
# write_index's)
FIGURE_CALLERS = {"consensus/repro/verdicts.py", "paths/repro/verdicts.py", "bb/repro/runs.py",
                  "consensus/repro/runs.py", "paths/repro/runs.py", "compare/page.py"}  # fmt: skip
# run functions that write more than one report: a scan series writes each checkpoint's folder's report, then its own
REPORTS_OF_SUB_RUNS = {("scan/run.py", "run_series"): 2}


def _drawing(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every figure drawn or built in a module: a drawing call, `px.*`, an import of matplotlib,
    plotly.express, graph_objects or subplots, or a plotly figure written as a dict literal with "data" and
    "layout"."""
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            owner = getattr(f.value, "id", "") if isinstance(f, ast.Attribute) else ""
            if name in DRAWING_CALLS or name in PLOTLY_JSON_BUILDERS or owner == "px":
                found.append((n.lineno, f"{owner + '.' if owner else ''}{name}()"))
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]
            found += [(n.lineno, f"import {m}") for m in mods if m.startswith(DRAWING_MODULES)]
        elif isinstance(n, ast.Dict):
            keys = {k.value for k in n.keys if isinstance(k, ast.Constant)}
            if {"data", "layout"} <= keys:
                found.append((n.lineno, "a plotly figure dict"))
    return found


def test_drawing_check_sees_each_kind_of_figure():
    """The check below flags each way of drawing, and not the calls that lay out a page."""
    code = (
        "import plotly.graph_objects as go\nfig = go.Figure()\npx.line(df)\nsave_figure(f, p)\nfig.savefig(b)\n"
        "spec = {'data': [], 'layout': {}}\nwith_slider(spec, [], [], '')\nrep.figure(path)\nrep.plotly(spec, 'x')\n"
    )
    assert sorted({line for line, _ in _drawing(ast.parse(code))}) == [1, 2, 3, 4, 5, 6, 7]


@pytest.mark.parametrize("room", DRAWING_ROOMS)
def test_rooms_draw_only_in_figures(room: str):
    """Issue 20: every figure of a room, PNG or interactive, is drawn in its figures.py (from saved arrays): no
    run.py, report.py, computation or claims module builds or saves one. attnlab/reports/plotting.py and the report
    builder attnlab/reports/page.py hold the shared primitives. Only report.py and run.py call figures.py (the run
    has its PNGs drawn from the arrays it saved, or the report has them drawn as it writes the page)."""
    found = [
        f"{path.relative_to(ROOT)}:{line} {what}"
        for path in sorted((PACKAGE / room).rglob("*.py"))
        if path.name != "figures.py"
        for line, what in _drawing(ast.parse(path.read_text()))
    ]
    found += [
        f"{path.relative_to(ROOT)} imports attnlab.{room}.figures"
        for path in sorted((PACKAGE / room).rglob("*.py"))
        if path.name not in ("figures.py", "report.py", "run.py")
        and str(path.relative_to(PACKAGE)) not in FIGURE_CALLERS
        and f"attnlab.{room}.figures" in _imported_names(ast.parse(path.read_text()))
    ]
    assert not found, found


def _is_report_entry(node: ast.AST) -> bool:
    """`def write_report(run: RunDir) -> Path`."""
    if not isinstance(node, ast.FunctionDef):
        return False
    args = node.args
    plain = not (args.posonlyargs or args.kwonlyargs or args.vararg or args.kwarg or args.defaults)
    ann = [getattr(a.annotation, "id", None) for a in args.args]
    return (
        plain
        and [a.arg for a in args.args] == ["run"]
        and ann == ["RunDir"]
        and getattr(node.returns, "id", "") == "Path"
    )


@pytest.mark.parametrize("room", REPORT_ROOMS)
def test_rooms_have_one_report_entry(room: str):
    """Issue 20: a room's report.py defines one public function, `write_report(run: RunDir) -> Path`; neither it
    nor figures.py imports the room's run.py (the run calls the report, never the other way); only run.py calls
    write_report, each run function at most once."""
    tree = ast.parse((PACKAGE / room / "report.py").read_text())
    public = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    public = [n for n in public if not n.name.startswith("_")]
    assert [n.name for n in public] == ["write_report"], [n.name for n in public]
    assert _is_report_entry(public[0]), ast.unparse(public[0])
    for name in ("report.py", "figures.py"):
        imported = _imported_names(ast.parse((PACKAGE / room / name).read_text()))
        assert f"attnlab.{room}.run" not in imported, f"attnlab/{room}/{name} imports attnlab.{room}.run"
    for path in sorted((PACKAGE / room).rglob("*.py")):
        for fn in (n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)):
            calls = [c for c in ast.walk(fn) if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "write_report"]
            most = REPORTS_OF_SUB_RUNS.get((str(path.relative_to(PACKAGE)), fn.name), 1 if path.name == "run.py" else 0)
            assert len(calls) <= most, f"{path.relative_to(ROOT)}: {fn.name}"


def _imported_names(tree: ast.Module) -> set[str]:
    """Every module a file imports, and each `from M import x` as M.x too (x may be a module)."""
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            names |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module:
            names |= {n.module} | {f"{n.module}.{a.name}" for a in n.names}
    return names


# run-folder readers: a study's cli.py parses argv into a config and calls the run function, which reads the folder
RUN_FOLDER_MODULES = {"attnlab.runs", "attnlab.runs.results", "attnlab.training.checkpoint", "attnlab.runs.configs"}
RUN_FOLDER_READERS = {"RunDir", "open_run", "read_json", "read_jsonl", "load_run", "read_config", "read_manifest",
                      "read_train_config", "config_from_dict", "recover_replaced", "run_status", "check_out_folder",
                      "load_checkpoint", "latest_checkpoint", "read_state", "resumed", "resumed_config"}  # fmt: skip


def test_cli_modules_import_no_run_folder_reader():
    """Issue 20: `--resume` (and any other reading of a run folder) is the run function's, so the CLI and a notebook
    behave alike; no room's cli.py imports a run-folder module or reader, at module level or inside a function."""
    found = []
    for path in sorted(PACKAGE.glob("*/cli.py")):
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.ImportFrom) and n.module:
                names = {a.name for a in n.names}
                if n.module in RUN_FOLDER_MODULES or names & RUN_FOLDER_READERS:
                    found.append(
                        f"{path.relative_to(ROOT)}:{n.lineno} from {n.module} import {', '.join(sorted(names))}"
                    )
            elif isinstance(n, ast.Import):
                found += [f"{path.relative_to(ROOT)}:{n.lineno} import {a.name}" for a in n.names
                          if a.name in RUN_FOLDER_MODULES]  # fmt: skip
            elif isinstance(n, ast.Attribute) and n.attr in RUN_FOLDER_READERS:
                found.append(f"{path.relative_to(ROOT)}:{n.lineno} .{n.attr}")
    assert not found, found


def test_paths_room_draws_only_in_figures_and_has_one_report_entry():
    """Issue 20, the paths room after its regrouping into sub-rooms: every figure (PNG and interactive, the claims'
    S6/S7 ones included) is drawn in `paths/figures.py`, and `paths/report.py` has the one entry
    `write_report(run: RunDir) -> Path` (the checks above, over every sub-room's modules)."""
    assert (PACKAGE / "paths" / "theory").is_dir() and not (PACKAGE / "paths" / "claims_figures.py").exists()
    test_rooms_draw_only_in_figures("paths")
    test_rooms_have_one_report_entry("paths")
    assert _drawing(ast.parse((PACKAGE / "paths" / "figures.py").read_text())), "the check must see figures.py draw"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_imports(tree: ast.Module, modules: set[str]) -> list[tuple[str, str | None]]:
    """(attnlab module, imported name or None) of every run-time import, function-level ones included;
    `from attnlab.x import y` names module `attnlab.x.y` when y is a module."""
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)}  # fmt: skip
    found: list[tuple[str, str | None]] = []
    for n in ast.walk(tree):
        if id(n) in skip:
            continue
        if isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == "attnlab":
            found += [(f"{n.module}.{a.name}" if f"{n.module}.{a.name}" in modules else n.module, a.name)
                      for a in n.names]  # fmt: skip
        elif isinstance(n, ast.Import):
            found += [(a.name, None) for a in n.names if a.name.split(".")[0] == "attnlab"]
    return found


def _import_graph() -> tuple[dict[str, set[str]], set[str]]:
    """({attnlab module: the attnlab modules it imports at run time}, the package names)."""
    paths = {_module_name(p): p for p in _sources()}
    modules = set(paths)
    edges = {m: {t for t, _ in _module_imports(ast.parse(p.read_text()), modules)} - {m} for m, p in paths.items()}
    packages = {m for m, p in paths.items() if p.name == "__init__.py"}
    return edges, packages


def test_no_package_imports_a_package_that_imports_it_back():
    """Issue 20: no two sibling packages (attnlab.bb and attnlab.series; attnlab.paths.theory and
    attnlab.paths.sampling; ...) import each other, counting every module inside each, and no two modules do."""
    edges, packages = _import_graph()

    def packages_of(module: str) -> list[str]:
        parts = module.split(".")
        return [p for p in (".".join(parts[:i]) for i in range(2, len(parts) + 1)) if p in packages]

    between: dict[str, set[str]] = {}
    for a, targets in edges.items():
        for b in targets:
            for P in packages_of(a):
                between.setdefault(P, set()).update(
                    Q for Q in packages_of(b) if Q != P and Q.rsplit(".", 1)[0] == P.rsplit(".", 1)[0]
                )
    package_cycles = sorted(f"{P} <-> {Q}" for P in between for Q in between[P] if P < Q and P in between.get(Q, ()))
    module_cycles = sorted((a, b) for a in edges for b in edges[a] if a < b and a in edges.get(b, ()))
    assert not package_cycles, package_cycles
    assert not module_cycles, module_cycles
    assert "attnlab.paths.theory" in between["attnlab.paths.sampling"], "the check must see sampling import theory"


def test_no_study_imports_another_studys_private_module():
    """Issue 20: a room imports another room's public modules and names only, never `attnlab.bb._theory`,
    `attnlab.series._train` or a `_name` (rooms: the one table in attnlab.core.registry)."""
    from attnlab.core.registry import commands

    rooms = set(commands())
    paths = {_module_name(p): p for p in _sources()}
    found = []
    for module, path in paths.items():
        room = module.split(".")[1] if module.count(".") else ""
        if room not in rooms:
            continue
        for target, name in _module_imports(ast.parse(path.read_text()), set(paths)):
            parts = target.split(".")
            if len(parts) < 2 or parts[1] not in rooms or parts[1] == room:
                continue
            if any(p.startswith("_") for p in parts[2:]) or (name or "").startswith("_"):
                shown = target if not name or target.endswith(f".{name}") else f"{target}.{name}"
                found.append(f"{module} imports {shown}")
    assert not found, found


def test_study_configs_import_no_torch():
    """Issue 20: every room's config module imports without torch (one fresh interpreter for all of them), so a
    bad option is refused before torch loads."""
    from attnlab.core.registry import commands

    configs = [f"attnlab.{c}.config" for c in commands() if (PACKAGE / c / "config.py").is_file()]
    assert len(configs) >= 10, configs
    code = "import sys\n" + "".join(f"import {m}\n" for m in configs) + "print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False", f"importing {configs} pulled in torch"


# names that, three or more in one literal, make a list of the rooms or studies
def _room_and_study_names() -> set[str]:
    from attnlab.core.registry import commands, studies

    return set(commands()) | set(studies())


def test_the_studies_are_listed_once():
    """Issue 20: the rooms and studies are one table (attnlab.core.registry); `attnlab/__init__.py`, the CLI, the demo
    and `attnlab reproduce` read it, and no other module holds a literal list of them."""
    import attnlab
    import attnlab.cli
    import attnlab.core.registry as registry
    import attnlab.demo
    from attnlab.reproduce import config as reproduce_config
    from attnlab.reproduce import report as reproduce_report

    assert tuple(attnlab.cli.STUDY_CLIS) == registry.commands()
    assert attnlab._LAZY == (*registry.study_rooms(), "tracing")
    assert set(registry.study_rooms()) <= set(attnlab.__all__)
    assert reproduce_config.STUDIES == registry.studies()
    assert list(attnlab.demo.DEMOS) == list(registry.studies())
    assert reproduce_report.STUDY_TITLES is registry.STUDY_TITLES
    assert tuple(registry.STUDY_TITLES) == registry.studies()
    assert set(registry.STUDY_PACKAGES) == {r.command for r in registry.ROOMS if r.runs}
    names = _room_and_study_names()
    lists = []
    for path in _sources():
        if path.name == "registry.py" and path.parent == PACKAGE / "core":
            continue
        for n in ast.walk(ast.parse(path.read_text())):
            items = (
                n.keys if isinstance(n, ast.Dict) else n.elts if isinstance(n, (ast.List, ast.Tuple, ast.Set)) else []
            )
            found = {i.value for i in items if isinstance(i, ast.Constant) and i.value in names}
            if len(found) >= 3:
                lists.append(f"{path.relative_to(ROOT)}:{n.lineno} {sorted(found)}")
    assert not lists, lists


# --- issue 38: the trace layer's speed paths behind one door (attnlab.tracing.fast) --------------------------------
FAST = PACKAGE / "tracing" / "fast"
FAST_MODULES = ("cpu_kernels", "flex", "fused", "nll", "staging", "statistics")  # numba, FlexAttention, fused, ...


def _in_fast(path: Path) -> bool:
    return path == FAST or FAST in path.parents


def test_the_speed_modules_live_in_tracing_fast():
    """The numba kernels, the fused attention path, the blocked NLL, the O(T·d) statistics and the staging buffers
    are modules of `attnlab.tracing.fast`, and nowhere else."""
    assert sorted(p.stem for p in FAST.glob("*.py") if p.name != "__init__.py") == sorted(FAST_MODULES)
    speed = (*FAST_MODULES, "hf_fused", "head_nll")
    stray = [str(p.relative_to(ROOT)) for p in _sources() if p.stem in speed and not _in_fast(p)]
    assert not stray, stray


def test_numba_is_imported_only_in_tracing_fast():
    found = []
    for path in _sources():
        for n in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else []
            names += [n.module] if isinstance(n, ast.ImportFrom) and n.module else []
            if any(m.split(".")[0] in ("numba", "llvmlite") for m in names) and not _in_fast(path):
                found.append(f"{path.relative_to(ROOT)}:{n.lineno}")
    assert not found, found
    assert "numba" in (FAST / "cpu_kernels.py").read_text(), "the check must see cpu_kernels import numba"


def test_tracing_fast_has_one_entry_point():
    """Outside `attnlab/tracing/fast/`, attnlab imports from `attnlab.tracing.fast` only (never a submodule, never a
    `_name`); inside, it imports no `_name` of a module outside (issue 38). Tests and benchmarks of the kernels
    themselves may read the submodules."""
    paths = {_module_name(p): p for p in _sources()}
    found = []
    for module, path in paths.items():
        inside = _in_fast(path)
        for target, name in _module_imports(ast.parse(path.read_text()), set(paths)):
            target_inside = target == "attnlab.tracing.fast" or target.startswith("attnlab.tracing.fast.")
            if inside == target_inside:
                continue
            private = (name or "").startswith("_") or any(p.startswith("_") for p in target.split("."))
            if private or (not inside and target != "attnlab.tracing.fast"):
                found.append(f"{module} imports {target} {name or ''}".strip())
    assert not found, found
    import attnlab.tracing.fast

    exported = set(attnlab.tracing.fast.__all__)
    assert not {n for n in exported if n.startswith("_")}, exported


# --- issue 38: the toy model's hook points are its module tree -----------------------------------------------------
POINT_NAME = re.compile(r"hook_|resid|pattern|scores|mlp\.out|attn\.|embed|final_ln|logits")


def test_toy_hook_points_come_from_the_module_tree():
    """`hook_points(toy)` are the parameter-free hook modules `named_modules()` finds, under TransformerLens's names,
    and neither the model nor its adapter holds a literal list of point names (issue 38)."""
    import attnlab
    from attnlab.toy.model import ToyConfig, ToyTransformer

    model = ToyTransformer(ToyConfig(n_layers=2, n_heads=2))
    tree = {n: m for n, m in model.named_modules() if n.rsplit(".", 1)[-1].startswith("hook_")}
    assert attnlab.hook_points(model) == list(tree) and len(tree) == 3 + 2 * 11
    assert {"blocks.0.hook_resid_pre", "blocks.0.attn.hook_z", "blocks.1.hook_mlp_out"} <= set(tree)
    assert not [n for n, m in tree.items() if list(m.parameters()) or list(m.buffers())]
    lists = []
    for rel in ("toy/model.py", "tracing/adapters/toy.py"):
        for n in ast.walk(ast.parse((PACKAGE / rel).read_text())):
            literal = isinstance(n, (ast.List, ast.Tuple, ast.Set))
            items = n.keys if isinstance(n, ast.Dict) else n.elts if literal else []
            names = [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
            if sum(bool(POINT_NAME.search(v)) for v in names) >= 2:
                lists.append(f"{rel}:{n.lineno} {names}")
    assert not lists, lists


# --- issue 38: one named place for each study's reproduction -----------------------------------------------------
REPRO_PACKAGES = {"bb": "bb", "real": "real", "consensus": "consensus", "paths": "paths"}  # study -> its package
REPRO_FILE_KINDS = ("claims.py", "targets.py", "reproduction.py", "computations.py")  # the old, unnamed kinds
LOWER = ("core", "errors")  # the layers a collector may import besides the studies' repro/ modules


def test_each_study_reproduction_lives_in_its_repro_folder():
    """Issue 38: a study's rows, runs, measures, verdicts and direct computations are `attnlab/<study>/repro/`
    (targets.py, runs.py, measures.py, verdicts.py, checks*.py; the real-models study's in attnlab/real/repro/), so
    a target's row, run, figure and verdict are found from its id in one folder. No room keeps a claims.py,
    targets.py, reproduction.py or computations.py; every target of `attnlab reproduce` comes from a repro/ module,
    and the collectors import only those."""
    from attnlab.core.registry import studies
    from attnlab.reproduce import experiments
    from attnlab.reproduce.targets import TARGETS

    assert set(REPRO_PACKAGES) == set(studies())
    for package in REPRO_PACKAGES.values():
        repro = PACKAGE / package / "repro"
        names = {p.name for p in repro.glob("*.py")}
        assert {"__init__.py", "targets.py", "runs.py", "measures.py", "verdicts.py"} <= names, (package, names)
        assert ast.get_docstring(ast.parse((repro / "__init__.py").read_text())), f"{package}/repro says nothing"
        assert all(n in {"__init__.py", "targets.py", "runs.py", "measures.py", "verdicts.py"} or
                   re.fullmatch(r"checks(_\w+)?\.py", n) for n in names), names  # fmt: skip
    shared = (PACKAGE / "core", PACKAGE / "reproduce")  # the vocabulary (core/targets.py) and the collector
    stray = [str(p.relative_to(ROOT)) for p in _sources()
             if p.name in REPRO_FILE_KINDS and p.parent.name != "repro" and p.parent not in shared]  # fmt: skip
    assert not stray, f"reproduction files outside a study's repro/: {stray}"
    big = [f"{p.relative_to(ROOT)} ({n} lines)" for p in _sources() if p.parent.name == "repro"
           and (n := len(p.read_text().splitlines())) > 600]  # fmt: skip
    assert not big, big
    kinds = {"targets": "targets", "experiments": "runs"}  # collector -> the repro module it collects
    for collector, kind in kinds.items():
        tree = ast.parse((PACKAGE / "reproduce" / f"{collector}.py").read_text())
        studied = {m for m in _imported_names(tree) if m.startswith("attnlab.") and m.split(".")[1] not in LOWER}
        wanted = {f"attnlab.{p}.repro.{kind}" for p in REPRO_PACKAGES.values()}
        packages = {w.rsplit(".", 1)[0] for w in wanted}  # `from attnlab.bb.repro import runs` names the package too
        got = {w for w in wanted if any(m == w or m.startswith(w + ".") for m in studied)}
        other = {m for m in studied if m not in packages and not any(m == w or m.startswith(w + ".") for w in wanted)}
        assert got == wanted and not other, (collector, sorted(wanted - got), sorted(other))
    for t in TARGETS:
        where = t.measure.__module__ if t.measure is not None else "attnlab.core.targets"
        assert ".repro." in where or where == "attnlab.core.targets", (t.id, where)  # core: `computed(experiment)`
        assert t.study in REPRO_PACKAGES, t.id
    for name, exp in experiments.EXPERIMENTS.items():
        fns = [f for f in (exp.runs, exp.figure, exp.compute) if f is not None]
        assert all(f.__module__.startswith("attnlab.") and (".repro." in f.__module__ or f.__module__ ==
                   "attnlab.core.experiments") for f in fns), (name, [f.__module__ for f in fns])  # fmt: skip


MAX_PARAMETERS = 8  # a function taking more passes a config object (a frozen dataclass) for a group that travels
# Functions over MAX_PARAMETERS, by name (robust to a file moving), with the count they may not exceed and why they
# keep a long list; one that shrinks to MAX_PARAMETERS or below must leave this list (a ratchet: the count can only
# fall). Named by function: a name over the cap that is not here fails, wherever it lives.
LONG_SIGNATURES = {
    # public entry points whose keywords are the documented API (README, tests/real/test_api.py)
    "trace": (12, "attnlab.api.trace: the public one-call trace; each keyword a documented option"),
    "integrate": (15, "consensus integrator: keyword options used across consensus/repro and tests; a group "
                  "(recording, run control) would be its next config object"),
    "make_schedule": (10, "consensus schedule factory: each keyword one schedule's parameter (by name)"),
    "target": (12, "core/targets.py: a declarative registry row, one keyword per Target field"),
    # a signature fixed by another library or by numba
    "attnlab_attention": (12, "transformers' attention-interface signature (module, query, key, value, mask, ...)"),
    "attention": (9, "the function registered with transformers' attention interface: its signature"),
    "_attend_chunk": (9, "tracing hot loop: tensors and a span, called once per query chunk"),
    "_softmax_rows": (11, "numba kernel: arrays and scalars only (no dataclass inside njit)"),
    "trace_windows": (9, "tracing's window loop: its options (stats, factors, arch) grew with issue 38 item 6; "
                      "the candidate for a trace-options object shared with `traced`"),
    # figures and private helpers of one caller
    "plot_E_curves": (9, "one figure's matplotlib options (labels, scales, marks), each used once"),
    "_advance_chunk": (9, "integrate's one inner step, passing the integrator's state through"),
    "iterate_stack": (13, "consensus model: one ModelConfig group per call from modelrun.iterate_groups; the "
                      "candidate for a stack-run config object"),
    "gd_loop": (9, "paths pruning: one training loop's settings, called by train_gd only"),
    "train_gd": (9, "paths pruning: one network's training settings (steps, batch, Adam, seed, pool, augment), "
                 "called by pipeline.train_network only"),
    "_polish_stalled_lbfgs": (9, "paths solver: the stalled L-BFGS state handed to its polish"),
    "_result": (10, "paths solver: the pieces of one SaddlePoint, from its two solver paths"),
    "build_data": (11, "paths task data: one keyword (with a default) per task setting; callers pass a few"),
    "theory_point": (10, "paths theory: one solve's settings (form, method, tol, init, max_iter, ...)"),
    "sweep_points": (9, "paths theory: theory_point's settings over a list of N"),
    # paths sampling: (chains, warmup, draws, n_leapfrog, seed) travel together: the candidate for a chain config
    "sample_point": (14, "paths sampling: the chain settings group, not yet an object"),
    "sample_chains": (11, "paths sampling: the chain settings group, not yet an object"),
    "compare_point": (11, "paths sampling: the chain settings group, not yet an object"),
    "protocol_point": (10, "paths sampling: the chain settings group, not yet an object"),
    "run_S6": (9, "paths repro (another helper's room now): one reproduction row's sizes and chain settings"),
}  # fmt: skip


def _parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Parameters a caller can pass: positional, keyword-only, *args and **kwargs (not self or cls)."""
    a = node.args
    named = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
    return len(named) + (a.vararg is not None) + (a.kwarg is not None)


def test_functions_take_few_parameters():
    """No function over MAX_PARAMETERS parameters but those of LONG_SIGNATURES, none above its count there, and
    each of those still over the cap (else it leaves the list)."""
    over: dict[str, list[tuple[str, int]]] = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = _parameter_count(node)
                if n > MAX_PARAMETERS:
                    over.setdefault(node.name, []).append((f"{path.relative_to(ROOT)}:{node.lineno}", n))
    bad = [f"{where} {name} ({n} parameters; allowed {LONG_SIGNATURES.get(name, (MAX_PARAMETERS,))[0]})"
           for name, found in over.items() for where, n in found
           if n > LONG_SIGNATURES.get(name, (MAX_PARAMETERS,))[0]]  # fmt: skip
    assert not bad, "give these a config object (or list them, with the reason):\n" + "\n".join(bad)
    stale = sorted(set(LONG_SIGNATURES) - set(over))
    assert not stale, f"at or under {MAX_PARAMETERS} parameters now: remove from LONG_SIGNATURES: {stale}"


def test_the_slow_files_run_first_exist_and_run_first():
    """tests/conftest.py's SLOW_FILES: each path is a test file (a renamed one would silently fall back to its
    collection place), and the collection starts with them in that order."""
    from tests.conftest import SLOW_FILES

    missing = [f for f in SLOW_FILES if not (ROOT / f).is_file()]
    assert not missing, f"SLOW_FILES names files that do not exist: {missing}"
    given = ["tests/core/test_lock.py", SLOW_FILES[1], SLOW_FILES[0]]  # the reverse of the order wanted
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *given], cwd=ROOT,
                         capture_output=True, text=True, timeout=300).stdout  # fmt: skip
    files = [line.split("::")[0] for line in out.splitlines() if "::" in line]
    firsts = list(dict.fromkeys(files))
    assert firsts[:2] == list(SLOW_FILES[:2]) and firsts[-1] == "tests/core/test_lock.py", firsts
