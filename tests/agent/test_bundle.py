"""`export` and `verify` round-trip on the test track through the real loop and the real runner: the best train.py and
its patch go home, the bundle carries what a stranger needs with keys and paths scrubbed, and `verify` re-trains both
sides in the sandbox with fresh seeds, scores them with the trusted evaluator and says whether the gain reproduces. A
bundle that was tampered with is refused before anything trains."""

import json
import math
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from agent import cli
from agent.bundle.manifest import Bundle
from agent.bundle.reproduce import _tested
from agent.loop import LoopSettings, run_loop
from agent.recording.ledger import Ledger
from agent.running.runner import LocalRunner
from tests.agent.judging.test_holdout_gate import RATES, line_of
from tests.helpers.scripted import ScriptedChanges
from trainer.tracks.hyperparameters import set_hyperparameters

SECRET = "sk-ant-api03-not-a-real-key-0123456789"


@pytest.fixture(scope="module")
def exported(test_track, tmp_path_factory):
    """A night whose baseline cannot learn (every learning rate 0) and whose one change can, exported."""
    from agent.workspace import Workspace
    from tests.agent.conftest import PROGRAM
    root = tmp_path_factory.mktemp("bundle")
    workspace = Workspace.create("t", test_track.spec, PROGRAM, root=root / "workspaces")
    source = workspace.file_at("train.py")
    frozen = set_hyperparameters(source, dict.fromkeys(RATES, 0.0))
    workspace.advance_to(workspace.commit_train(frozen, "every learning rate 0"))
    restore = [(line_of(frozen, name), line_of(source, name)) for name in RATES]
    warmdown = line_of(frozen, "WARMDOWN_RATIO")  # and a comment a careless proposer wrote: a key, a path
    restore.append((warmdown, warmdown.rstrip("\n") + f"  # {SECRET} {workspace.dir}/notes\n"))
    run_loop(workspace, ScriptedChanges((f"learn again ({SECRET})", restore)), LocalRunner(),
             LoopSettings(max_experiments=2, noise_seeds=0), say=lambda _: None)
    records = Ledger(workspace.dir).records
    assert records[-1].status == "keep", records[-1].reason
    with open(workspace.dir / records[-1].transcript, "a") as transcript:  # what a careless tool might have echoed
        transcript.write(json.dumps({"type": "tool_result", "content": f"key {SECRET} in {workspace.dir}/notes"})
                         + "\n")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("ANTHROPIC_API_KEY", SECRET)
        said = CliRunner().invoke(cli.app, ["export", "--tag", "t", "--workspaces", str(root / "workspaces")])
    assert said.exit_code == 0, said.output
    return workspace, records, root / "workspaces" / "t-bundle"


def test_export_writes_the_best_its_patch_and_a_scrubbed_bundle(exported, tmp_path):
    workspace, records, bundle = exported
    baseline, best = records[0], records[-1]
    trained = workspace.file_at("train.py", best.commit)
    assert SECRET in trained and (bundle / "train.py").read_text() == trained.replace(SECRET, "<secret>").replace(
        str(workspace.dir), "<workspace>")  # the code as it trained, but for what must not leave the machine
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(bundle / "baseline_train.py", home / "train.py")
    subprocess.run(["git", "apply", str(bundle / "best.patch")], cwd=home, check=True)
    assert (home / "train.py").read_text() == (bundle / "train.py").read_text()  # the patch takes the baseline there
    manifest = Bundle.model_validate_json((bundle / "manifest.json").read_text())
    assert (manifest.baseline_id, manifest.best_id, manifest.track) == (baseline.id, best.id, "test")
    keep, = manifest.keeps
    assert keep.gain == best.evidence.gain and "fell" in keep.implausible_fall
    assert [r.seed for r in keep.runs] == [r.seed for r in best.runs] and all(r.trusted for r in keep.runs)
    log = (bundle / keep.runs[0].log).read_text()
    assert "step" in log and "val_bpb:" not in log  # up to its seal: not the summary it printed after
    everything = "".join(p.read_text() for p in bundle.rglob("*") if p.is_file())
    assert SECRET not in everything and str(workspace.dir) not in everything
    assert "<secret>" in everything and "<workspace>/notes" in everything


def test_verify_re_trains_both_sides_and_the_gain_reproduces(exported):
    _, _, bundle = exported
    said = CliRunner().invoke(cli.app, ["verify", str(bundle), "--runs", "2"])
    assert said.exit_code == 3, said.output  # it reproduces, against a baseline the bundle chose: a person reads it
    assert said.output.count("(trusted)") == 4
    assert "the gain reproduces against the bundle's own baseline only" in " ".join(said.output.split())
    assert "Welch's t-test, one-sided: p" in said.output
    # its baseline cannot learn: the gain is real against it, and the verdict says what it was measured against
    assert f"differs from this track's train.py in {2 * len(RATES)} line(s)" in " ".join(said.output.split())


@pytest.mark.parametrize("tamper, refused", [
    (lambda b: (b / "train.py").write_text((b / "train.py").read_text() + "\nimport subprocess\n"),
     "refused as an edit would be"),
    (lambda b: _manifest(b, frozen={"prepare.py": "0" * 64, "track.json": "0" * 64}), "frozen files differ"),
    (lambda b: _manifest(b, data="another corpus"), "was made on track test with data another corp"),
    (lambda b: _manifest(b, format=9), "of format 9"),
    (lambda b: (b / "manifest.json").write_text("{"), "is not a bundle's manifest"),
    (lambda b: ((b / "train.py").unlink(), (b / "train.py").symlink_to("/etc/passwd")), "not a plain file"),
    (lambda b: ((b / "manifest.json").unlink(), (b / "manifest.json").mkdir()), "not a plain file"),
    (lambda b: (b / "manifest.json").write_text("[" * 100_000 + "]" * 100_000), "is not a bundle's manifest"),
    (lambda b: _manifest(b, tag="\ud800"), "is not a bundle's manifest"),
    (lambda b: _manifest(b, format=1.0), "is not a bundle's manifest"),
    (lambda b: (b / "train.py").write_text("def (:\n"), "do not parse as Python"),
    (lambda b: (b / "baseline_train.py").write_text("x = " + "-" * 200_000 + "1\n"), "do not parse as Python"),
])
def test_a_tampered_bundle_is_refused_before_anything_trains(exported, tmp_path, tamper, refused):
    _, _, bundle = exported
    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy, symlinks=True)
    tamper(copy)
    said = CliRunner().invoke(cli.app, ["verify", str(copy), "--runs", "2"])
    assert said.exit_code == 2 and refused in " ".join(said.output.split()), said.output
    assert "(trusted)" not in said.output and "Traceback" not in said.output
    if "differ" not in refused and "was made on" not in refused:  # what needs no track is refused before one
        assert "verifying" not in said.output


def _manifest(bundle, **changed):
    manifest = json.loads((bundle / "manifest.json").read_text())
    (bundle / "manifest.json").write_text(json.dumps(manifest | changed))


def test_the_reproduction_test_is_welch_s():
    bundle = Bundle(tag="t", track="test", data="d", frozen={}, baseline_id="0000", best_id="0001",
                    baseline_val_bpb=1.0, best_val_bpb=0.9, gain=0.1, keeps=[], llm_usd=0, device_hours=0,
                    device="CPU", hardware=[], tolerances=None, keep_rule="", exported="")
    baseline, best = [1.00, 1.02, 0.99], [0.97, 0.99, 0.96]
    found = _tested(bundle, baseline, best)
    # by hand: means 1.003333 and 0.973333, variances 0.000233 and 0.000233, se^2 = 2 * 0.000233 / 3
    se = (2 * 0.00023333333 / 3) ** 0.5
    t = 0.03 / se
    assert found.gain == pytest.approx(0.03) and found.df == pytest.approx(4.0)
    theta = math.atan(t / 2)  # Student's t on 4 df in closed form: F(t) = 1/2 + sin(theta) (1 + cos^2(theta) / 2) / 2
    assert found.p == pytest.approx(0.5 - math.sin(theta) * (1 + math.cos(theta) ** 2 / 2) / 2, rel=1e-6)
    assert found.reproduces and found.low < 0.03 < found.high
    assert not _tested(bundle, baseline, [0.99, 1.01, 1.00]).reproduces
