"""The habits that keep the project honest: the tests run on the oldest Python the project
claims, and the tools that check the code are told that same version."""

import configparser
import os
import re
import sys
import tomllib

from conftest import TOP


def oldest_python():
    """The version setup.cfg's python_requires admits first, as (major, minor)."""
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(TOP, "setup.cfg"))
    m = re.fullmatch(r">=(\d+)\.(\d+)", cfg["options"]["python_requires"].strip())
    assert m, "python_requires is not of the form >=X.Y"
    return int(m[1]), int(m[2])


def test_the_tests_run_on_the_oldest_python_the_project_claims():
    """setup-host builds .venv with that Python, so CI (`make check`, `make test`) proves the
    claim; a venv of a newer Python would let code the claimed one cannot run pass."""
    assert sys.version_info[:2] == oldest_python(), (
        f"the tests run on Python {sys.version.split()[0]}, setup.cfg claims "
        f"{'.'.join(map(str, oldest_python()))}: run reproducers/setup-host"
    )


def test_the_checkers_are_told_the_claimed_python():
    """ruff judges syntax and upgrades, mypy the standard library, for one version: the one
    the project claims."""
    with open(os.path.join(TOP, "pyproject.toml"), "rb") as f:
        tool = tomllib.load(f)["tool"]
    major, minor = oldest_python()
    assert tool["ruff"]["target-version"] == f"py{major}{minor}"
    assert tool["mypy"]["python_version"] == f"{major}.{minor}"
