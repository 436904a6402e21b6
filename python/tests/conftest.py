"""Shared fixtures: the repository, the real captures beside it, and the `roce` command the
Python results are compared with (the package and the CLI run the same Rust code; the tests
check that what crosses into Python is what the CLI prints)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
CAPTURES = REPO.parent / "shared" / "captures"


def roce_bin() -> str:
    """The `roce` command: $ROCE_BIN, else the workspace's release or debug build (built if
    neither exists)."""
    env = os.environ.get("ROCE_BIN")
    if env:
        return env
    for profile in ("release", "debug"):
        p = REPO / "target" / profile / "roce"
        if p.exists():
            return str(p)
    cargo = shutil.which("cargo")
    if cargo is None:
        pytest.fail("no roce binary and no cargo to build one (set ROCE_BIN)")
    subprocess.run([cargo, "build", "-q", "--bin", "roce"], cwd=REPO, check=True)
    return str(REPO / "target" / "debug" / "roce")


@pytest.fixture(scope="session")
def roce_cli() -> str:
    return roce_bin()


@pytest.fixture(scope="session")
def captures() -> pathlib.Path:
    if not CAPTURES.is_dir():
        pytest.fail(f"the shared captures are not at {CAPTURES}")
    return CAPTURES
