"""Prints the per-field agreement with the real Pi after the differential tests ran."""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.services import test_oracle_context

    if not test_oracle_context.AGREEMENT.total and not test_oracle_context.AGREEMENT.skipped:
        return
    terminalreporter.section("agreement with the real Pi 1.6.0 (ours == oracle / judged)")
    terminalreporter.write_line(test_oracle_context.agreement_report())
