"""Under CI=true a test that needs what CI builds (tests/conftest.py's CI_MUST_RUN) fails where
it would skip; elsewhere, and for every other test, a skip stays a skip."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CONFTEST = textwrap.dedent(f"""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "specviz_tests_conftest", {str(Path(__file__).with_name("conftest.py"))!r})
    rules = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rules)
    pytest_runtest_makereport = rules.pytest_runtest_makereport
""")
SKIPPING = "import pytest\n\ndef test_it():\n    pytest.skip('llama-server is not built here')\n"


@pytest.mark.parametrize("ci, outcome", [("true", "1 failed, 1 skipped"), ("", "2 skipped")])
def test_a_skip_of_what_ci_builds_fails_under_ci(ci, outcome, tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_server_llama.py").write_text(SKIPPING)  # one CI must run
    (tmp_path / "test_elsewhere.py").write_text(SKIPPING)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "-rfs", str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CI": ci})
    assert outcome in done.stdout, done.stdout + done.stderr
    if ci:
        assert "skipped under CI=true, where it must run: llama-server is not built" in \
            done.stdout, done.stdout
