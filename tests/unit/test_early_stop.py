"""``connector.early_stop``: the stop signals taken before any import, handed to ``run`` or given back."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

from connector.stream.shutdown import GracefulStop


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60, check=False
    )


def test_a_signal_before_run_handles_it_is_remembered_not_fatal() -> None:
    done = _python(
        """
        import os, signal
        from connector import early_stop
        early_stop.install()
        os.kill(os.getpid(), signal.SIGTERM)
        print(early_stop.requested())
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "SIGTERM"


def test_release_gives_the_default_back_and_delivers_a_signal_that_came() -> None:
    done = _python(
        """
        import os, signal
        from connector import early_stop
        early_stop.install()
        os.kill(os.getpid(), signal.SIGTERM)
        early_stop.release()
        print("still alive")
        """
    )
    assert done.returncode == -signal.SIGTERM
    assert "still alive" not in done.stdout


def test_a_tool_command_dies_of_sigint_as_before() -> None:
    # The tools release the early handlers: Ctrl-C interrupts them (KeyboardInterrupt) instead of being swallowed.
    done = _python(
        """
        import os, signal, sys
        from connector import early_stop
        early_stop.install()
        from connector.commands import cli
        sys.argv = ["connector", "validate", "/nonexistent-landing-zone"]
        os.kill(os.getpid(), signal.SIGINT)
        cli.main()
        print("not interrupted")
        """
    )
    assert "not interrupted" not in done.stdout
    assert "KeyboardInterrupt" in done.stderr


def test_graceful_stop_takes_over_a_signal_received_during_start_up() -> None:
    done = _python(
        """
        import os, signal
        from connector import early_stop
        early_stop.install()
        os.kill(os.getpid(), signal.SIGTERM)
        from connector.stream.shutdown import GracefulStop
        graceful = GracefulStop()
        graceful.install()
        print(graceful.requested.is_set(), graceful.signal_name)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "SIGTERM"]


def test_without_an_early_signal_graceful_stop_is_not_requested() -> None:
    graceful = GracefulStop()
    restore = graceful.install()
    try:
        assert not graceful.requested.is_set()
    finally:
        restore()
