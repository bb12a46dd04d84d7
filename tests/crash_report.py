"""A native crash inside one test is that test's failure, not the end of the suite.

The suite runs in a pytest-xdist worker (`-n 1` in pyproject's addopts): when a test kills the
worker with a signal, xdist reports that test as failed, starts a fresh worker and goes on.
These hooks, imported by conftest.py, name the machine in the header and in each crash: the
llama.cpp build and the CPU, the facts a crash in native code depends on.
"""

from __future__ import annotations

from functools import lru_cache

import pytest


@lru_cache(maxsize=1)
def machine_line() -> str:
    from specviz.engines.backends.probe import build_id
    from specviz.engines.machine.hardware import read_cpu

    try:
        from specviz.engines.backends.llama import system_info

        llama = f"{build_id('llama')}: {system_info().strip(' |')}"
    except Exception as exc:  # the header must not fail where llama.cpp is missing
        llama = f"llama.cpp unavailable ({exc})"
    return f"CPU {read_cpu().one_line()}; {llama}; {build_id('transformers')}"


def pytest_report_header(config) -> list[str]:
    return [f"specviz machine: {machine_line()}"]


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched) -> None:
    report.longrepr = (f"{report.longrepr}: the test process died in native code (the "
                       f"faulthandler traceback is above); {machine_line()}")
