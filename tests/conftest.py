"""Shared fixtures. The suite runs on the test track, prepared once per session from the
standard library into a temporary cache."""

import os

os.environ["AUTORESEARCH_TRACK"] = "test"  # read by trainer.prepare at import

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def test_track(tmp_path_factory):
    """The prepared test track (PreparedTrack); AUTORESEARCH_CACHE points at its cache."""
    from trainer.track_builder import prepare_track
    cache = tmp_path_factory.mktemp("cache")
    os.environ["AUTORESEARCH_CACHE"] = str(cache)
    return prepare_track("test", cache=cache, show_progress=False)
