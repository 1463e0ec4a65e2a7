"""Shared fixtures. The suite runs on the test track, prepared once per session from the
standard library into a temporary cache. A test that hangs ends the suite with every thread's stack."""

import faulthandler
import os

os.environ["AUTORESEARCH_TRACK"] = "test"  # read by trainer.prepare at import

import pytest  # noqa: E402

HANG_SECONDS = 900  # one test, its fixtures' setup and teardown included; the slowest takes a few minutes


def pytest_configure(config):
    config.stack_dump_fd = os.dup(2)  # stderr as it is before a test's output is captured


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test still running after HANG_SECONDS prints where every thread is and ends the run (exit code 1),
    rather than holding the suite until an outer timeout kills it without a word."""
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True, file=item.config.stack_dump_fd)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def test_track(tmp_path_factory):
    """The prepared test track (PreparedTrack); AUTORESEARCH_CACHE points at its cache."""
    from trainer.tracks.builder import prepare_track
    cache = tmp_path_factory.mktemp("cache")
    os.environ["AUTORESEARCH_CACHE"] = str(cache)
    return prepare_track("test", cache=cache, show_progress=False)
