# Every daemon the tests start, in this process or as a child process, checks the core invariants after each
# step of its ledger and its desk (io/daemon.py CHECK_ENV): the same functions as the stateful tests and the
# model checker, so a violation anywhere stops the run.
import os
from collections.abc import Generator
from typing import Any

import pytest

from harness.io.daemon import CHECK_ENV

os.environ[CHECK_ENV] = "1"


# The README's test command sets HARNESS_REQUIRE_ALL: there every part is installed (scripts/requirements.sh
# checked the machine first), so a test that skips for a missing part is a failure, never a pass.
REQUIRE_ALL = "HARNESS_REQUIRE_ALL"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get(REQUIRE_ALL) == "1":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under {REQUIRE_ALL}=1 (the test command needs every part): {reason}"
