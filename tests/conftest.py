"""Shared fixtures. Integration fixtures find Cassandra and Kafka through the TICKD_* settings and fail
loudly (never skip) when they do not answer: `make test` starts them; so does `make infra-up`."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace
from typing import TYPE_CHECKING

# Tests get their own keyspace unless the caller chose one (make test sets it).
os.environ.setdefault("TICKD_KEYSPACE", "tickd_test")

import pytest
from hypothesis import settings as _hypothesis_settings

if TYPE_CHECKING:
    from tests.integration.api_statuses import Ledger

# Properties are about correctness, not speed: a busy 2-core CI machine must not fail them on time.
_hypothesis_settings.register_profile("tickd", deadline=None)
_hypothesis_settings.load_profile("tickd")


# -- every status the API answers is declared -------------------------------------------------------------
# Session hooks, not a session fixture's teardown: the verdict is about the whole run, and a teardown error
# would be reported against whichever test happened to use the fixture last.


def _ledger() -> Ledger | None:
    """What the served apps answered (``tests/integration/api_statuses``); None if no test served one."""
    module = sys.modules.get("tests.integration.api_statuses")
    return None if module is None else module.LEDGER


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if a route answered a status its declaration does not list; the last line of the run
    counts them ("N passed, 1 API status problems")."""
    ledger = _ledger()
    problems = [] if ledger is None else ledger.problems()
    if not problems:
        return
    if exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        # Objects, not strings: other plugins read each entry's __dict__ as a report's.
        reporter.stats.setdefault("API status problems", []).extend(SimpleNamespace(message=p) for p in problems)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    ledger = _ledger()
    if ledger is None or not ledger.answered:
        return
    problems = ledger.problems()
    if problems:
        terminalreporter.write_sep("=", "API status problems (tests/integration/api_statuses.py)", red=True)
        for line in problems:
            terminalreporter.write_line(line)
    terminalreporter.write_line(f"API statuses: {ledger.summary()}")
