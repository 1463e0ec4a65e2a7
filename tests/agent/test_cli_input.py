"""Bad input on the command line: refused with a clear message and exit code 2 by every command, never
a traceback, never a path outside the workspace root."""

import subprocess

import pytest
from typer.testing import CliRunner

from agent import cli
from agent.untrusted import bounded, shown
from agent.workspace import tag_problem

BAD_TAGS = ["x.lock", "a..b", "x.", "../x", "a/b", ".hidden", "-x", "a b", "a~1", "a:b", "x@{1}", ""]
COMMANDS = [["status"], ["transcript"], ["report"], ["confirm"], ["steer", "program.md"], ["init"], ["run"]]


@pytest.mark.parametrize("tag", BAD_TAGS)
def test_a_bad_tag_is_refused_by_every_command(tag, tmp_path):
    outside = tmp_path / "x"
    outside.mkdir()  # what `../x` would reach from the workspace root
    (outside / "experiments.jsonl").write_text('{"id": "0000", "status": "keep", "val_bpb": 1.0}\n')
    for command in COMMANDS:
        args = [command[0], "--tag", tag, "--workspaces", str(tmp_path / "workspaces"), *command[1:]]
        result = CliRunner().invoke(cli.app, args)
        assert result.exit_code == 2, (command, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), (command, result.exception)
        assert "Invalid value for '--tag'" in result.output and "Traceback" not in result.output, result.output
    assert not (tmp_path / "workspaces").exists()


@pytest.mark.parametrize("tag", ["dec3-lr", "run_2.1", "A1", "x" * 64, "a.b-c_d", "9", "x..", "a..b", "x.lock", "x.",
                                 "-x", ".x", "_x", "a b", "a~b", "a^b", "a:b", "a?b", "a*b", "a[b", "a@{b", "a\tb",
                                 "é", "x" * 65, "", "../x", "a/b"])
def test_one_tag_rule_agrees_with_git_and_with_what_a_workspace_accepts(tag):
    """The rule (agent/workspace.py) against git's own check of the branch the tag names, for every kind of tag."""
    problem = tag_problem(tag)
    by_git = subprocess.run(["git", "check-ref-format", f"refs/heads/autoresearch/{tag}"]).returncode == 0
    plain = 0 < len(tag) <= 64 and tag[:1].isalnum() and tag.isascii() and all(c.isalnum() or c in "._-" for c in tag)
    if problem is None:
        assert by_git and plain  # what it accepts, git accepts, and it is a plain directory name
    else:
        assert not by_git or not plain  # it refuses only what git refuses or what is not a plain name
    if plain and not by_git:
        assert "git branch name" in problem


def test_transcript_reads_only_the_workspace_s_own_transcripts(workspace):
    (workspace.dir / "transcripts").mkdir(exist_ok=True)
    (workspace.dir / "transcripts" / "0000.jsonl").write_text('{"type": "note", "t": "now"}\n')
    (workspace.dir / "secret.jsonl").write_text('{"type": "secret", "t": "now"}\n')
    result = CliRunner().invoke(cli.app, ["transcript", "--tag", "t", "--workspaces", str(workspace.dir.parent),
                                          "../secret"])
    assert result.exit_code == 2 and "no transcript for experiment '../secret'" in result.output
    assert "secret\"" not in result.output and "there are 0000" in result.output


def test_untrusted_text_is_bounded_and_never_reaches_the_terminal_raw():
    text = "[/b]" + "\x1b]0;title\x07\x00\u202e\u2066" + "y" * 900_000
    one_line = bounded(text)
    assert len(one_line) < 600 and one_line.startswith("[/b]\\x1b]0;title\\x07\\x00\\u202e\\u2066")
    rendered = shown(text, 100)
    assert rendered.plain.startswith("[/b]\\x1b") and len(rendered.plain) < 150 and not rendered.spans


def test_a_workspace_whose_frozen_track_json_this_version_cannot_read_is_refused_in_one_line(test_track, tmp_path):
    from agent.workspace import Workspace
    from tests.agent.conftest import PROGRAM
    older = {key: value for key, value in test_track.spec.items() if key != "tokenizer"}  # as another version wrote
    Workspace.create("older", older, PROGRAM, root=tmp_path)
    for command in (["status"], ["report"], ["run", "--max-experiments", "1"]):
        result = CliRunner().invoke(cli.app, [command[0], "--tag", "older", "--workspaces", str(tmp_path),
                                              *command[1:]])
        assert result.exit_code == 2 and (result.exception is None or isinstance(result.exception, SystemExit)), \
            (command, result.exception)
        assert "track.json is not a track.json this version reads (tokenizer: Field required)" in result.output, \
            result.output
        assert "read this tag with the version that made it" in result.output and "Traceback" not in result.output
