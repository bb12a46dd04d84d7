"""Session fixtures for tests that need a real model; import them from conftest.py.

The model is fetched when the first test asks for it (never at import or collection time), into
the usual cache or $SPECVIZ_HOME, and then reused. Where it cannot be had, the tests are skipped,
except under CI=true where a missing model is a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specviz.engines.errors import ModelError
from specviz.engines.models import pull


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    try:
        return pull("smollm2-135m")  # returns at once when the model is already present
    except (ModelError, OSError) as error:
        reason = f"smollm2-135m is not available: {error}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
