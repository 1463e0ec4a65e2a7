"""A coding CLI's process: its output read line by line, its group killed at the timeout, and a run that ends
when the CLI exits even if a descendant that left the group (setsid) still holds its stdout open."""

import os
import signal
import time

from agent.proposers.cli.process import DRAIN_S, run_streaming

PLAIN = {"PATH": "/bin:/usr/bin"}


def test_lines_come_as_written_and_the_exit_code_is_kept(tmp_path):
    lines = []
    finished = run_streaming(["sh", "-c", "echo one; echo two; echo oops >&2; exit 3"], tmp_path, PLAIN, 10,
                             lines.append)
    assert lines == ["one\n", "two\n"] and finished.returncode == 3 and not finished.timed_out
    assert finished.stderr_tail == "oops\n"


def test_a_cli_that_hangs_is_killed_at_its_timeout(tmp_path):
    started = time.monotonic()
    finished = run_streaming(["sh", "-c", "echo one; sleep 60"], tmp_path, PLAIN, 1, lambda _: None)
    assert finished.timed_out and finished.returncode == -signal.SIGKILL
    assert time.monotonic() - started < 1 + DRAIN_S


def test_a_descendant_that_left_the_group_holding_stdout_does_not_hold_the_run(tmp_path):
    """It writes a line 6 s on, after the run is over: never handed over."""
    escapee = "echo $$; touch left; sleep 6; echo late; exec sleep 60"
    cli = f"echo one; setsid sh -c '{escapee}' & while [ ! -e left ]; do sleep 0.05; done; exit 0"
    lines = []
    started = time.monotonic()
    finished = run_streaming(["sh", "-c", cli], tmp_path, PLAIN, 30, lines.append)
    took = time.monotonic() - started
    escaped = int(lines[1])
    try:
        assert finished.returncode == 0 and not finished.timed_out and lines[0] == "one\n"
        assert took < DRAIN_S + 3, f"the run waited {took:.1f} s for a process that was not the CLI"
        time.sleep(max(0.0, started + 7 - time.monotonic()))
        assert lines == ["one\n", f"{escaped}\n"], "a line was handed over after the run was over"
    finally:
        os.kill(escaped, signal.SIGKILL)  # ours to end: this test started it
