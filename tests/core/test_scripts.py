"""The package's JavaScript files (the head explorer's layer_view.js, package data of attnlab.scan): each parses
(`node --check` where node is installed, and always a structural check in Python that needs nothing), is shipped
(pyproject's package-data names it) and is what the scan page embeds."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "attnlab"
SCRIPTS = sorted(PACKAGE.rglob("*.js"))
CLOSES = {")": "(", "]": "[", "}": "{"}
# after these a `/` starts a regular expression, after anything else (a name, a number, `)` or `]`) it divides
REGEX_AFTER = set("(,=:[!&|?{};+-*%<>~^") | {""}
REGEX_AFTER_WORDS = {"return", "typeof", "case", "in", "of", "delete", "void", "throw", "new", "else"}
# what str.format, an f-string or %-formatting leaves behind: an opening brace doubled (JavaScript closes two
# objects at once, `}}`, but hardly opens two), a {name} or {0} placeholder (plotly's %{z} is none), a %(name)s
FORMAT_LEFTOVER = re.compile(r"\{\{|(?<!%)\{(?:[A-Za-z_]\w*|\d+)\}|%\([A-Za-z_]\w*\)[sdrf]")


def _skip_quoted(text: str, i: int, line: int) -> tuple[int, int, str | None]:
    """(index after the string or regular expression opening at i, lines it spans, an error or None)."""
    quote, j, in_class = text[i], i + 1, False
    while j < len(text):
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "\n" and quote != "`":
            return j, 0, f"line {line}: {quote}...{quote} not closed on its line"
        if quote == "/" and ch in "[]":
            in_class = ch == "["
        elif ch == quote and not in_class:
            end = j + 1
            while quote == "/" and end < len(text) and text[end].isalpha():  # the regular expression's flags
                end += 1
            return end, text.count("\n", i, j), None
        j += 1
    return j, 0, f"line {line}: {quote}...{quote} not closed"


def js_structure_errors(text: str) -> list[str]:
    """Brackets, braces and parentheses balanced and nested outside strings, comments and regular expressions;
    every string, comment and regular expression closed; no Python-format leftovers; one `__CFG__`."""
    errors, stack = [], []
    i, line, prev, word = 0, 1, "", ""
    while i < len(text):
        c = text[i]
        if c.isspace():
            line += c == "\n"
            i += 1
        elif text.startswith("//", i):
            i = text.find("\n", i) if "\n" in text[i:] else len(text)
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                return [*errors, f"line {line}: /* not closed"]
            line, i = line + text.count("\n", i, end), end + 2
        elif c in "'\"`" or (c == "/" and (prev in REGEX_AFTER or word in REGEX_AFTER_WORDS)):
            i, lines, err = _skip_quoted(text, i, line)
            errors += [err] if err else []
            line, prev, word = line + lines, "a", ""
        elif c.isalnum() or c in "_$":
            start = i
            while i < len(text) and (text[i].isalnum() or text[i] in "_$"):
                i += 1
            prev, word = "a", text[start:i]
        else:
            if c in "([{":
                stack.append((c, line))
            elif c in CLOSES:
                if not stack or stack[-1][0] != CLOSES[c]:
                    opened = f"{stack[-1][0]} of line {stack[-1][1]}" if stack else "nothing"
                    errors.append(f"line {line}: {c} closes {opened}")
                else:
                    stack.pop()
            prev, word = c, ""
            i += 1
    errors += [f"line {n}: {o} never closed" for o, n in stack]
    errors += [f"a Python-format leftover: {m.group()!r}" for m in FORMAT_LEFTOVER.finditer(text)]
    if text.count("__CFG__") != 1:
        errors.append(f"__CFG__ (the page's settings) appears {text.count('__CFG__')} times, not once")
    return errors


def test_the_package_has_its_scripts():
    assert [p.relative_to(PACKAGE).as_posix() for p in SCRIPTS] == ["scan/layer_view.js"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_script_is_well_formed(script):
    assert js_structure_errors(script.read_text(encoding="utf-8")) == []


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed (the Python check still runs)")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_script_parses_in_node(script):
    out = subprocess.run(["node", "--check", str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


BROKEN = {
    "a brace dropped": lambda t: t.replace("if (res.error) return res;", "if (res.error) { return res;", 1),
    "a parenthesis dropped": lambda t: t.replace("Math.sqrt(w || 0)", "Math.sqrt(w || 0", 1),
    "a string not closed": lambda t: t.replace("'&amp;'", "'&amp;", 1),
    "a comment not closed": lambda t: t.replace("// a long window", "/* a long window", 1),
    "a format leftover": lambda t: t.replace("(__CFG__)", "({{cfg}})", 1),
}


@pytest.mark.parametrize("how", BROKEN)
def test_the_python_check_finds_a_broken_script(how):
    """The check means something without node: each way of breaking layer_view.js is found (and the regular
    expression /[&<>]/g, whose brackets are no code, is not taken for one)."""
    good = (PACKAGE / "scan" / "layer_view.js").read_text(encoding="utf-8")
    broken = BROKEN[how](good)
    assert broken != good
    assert js_structure_errors(broken), how


def test_every_script_is_package_data():
    """pyproject's [tool.setuptools.package-data] names each script, so a wheel ships it (an editable install reads
    the source folder)."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for script in SCRIPTS:
        package = ".".join(script.parent.relative_to(ROOT).parts)
        assert any(fnmatch.fnmatch(script.name, g) for g in data.get(package, [])), f"{script} is not package data"


def test_the_scan_page_embeds_the_script_as_it_is():
    """The page embeds layer_view.js as it is, after the drawing every attention view shares (ATTENTION_JS)."""
    from attnlab.reports.attention import ATTENTION_JS
    from attnlab.scan.figures import pattern_js

    text = (PACKAGE / "scan" / "layer_view.js").read_text(encoding="utf-8")
    assert pattern_js() == ATTENTION_JS + "\n" + text and text.endswith("})(__CFG__);\n")
    assert js_structure_errors(ATTENTION_JS + "__CFG__") == []  # the shared part is well formed too
