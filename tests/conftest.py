import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skipped test proves nothing: the test command installs everything the suite needs
    (".[dev,torch]"), so a skip means a missing dependency or a missing file, and it fails."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped, which the suite does not allow: {report.longrepr}"
