"""Bad input on the command line: refused with a clear message and exit code 2 by every command, never
a traceback, never a path outside the workspace root."""

import pytest
from typer.testing import CliRunner

from agent import cli
from agent.untrusted import bounded, shown

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


def test_git_ref_rules_decide_and_good_tags_pass():
    for tag in ("dec3-lr", "run_2.1", "A1"):
        assert cli.tag_problem(tag) is None
    assert "git branch name" in cli.tag_problem("x.lock") and "git branch name" in cli.tag_problem("a..b")
    assert "names a path" in cli.tag_problem("../x")


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
