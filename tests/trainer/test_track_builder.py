"""Building tracks from local sources, and the clear errors for bad input."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.prepare import SPLITS, PrepareError, Tokenizer
from trainer.tracks import corpus
from trainer.tracks.builder import prepare_track
from trainer.tracks.spec import TrackSpec

ROOT = Path(__file__).resolve().parents[2]


def stdlib_pieces(count, chars=600):
    pieces = []
    for path in corpus.stdlib_files():
        try:
            pieces.extend(corpus.chunk_text(path.read_text("utf-8"), chars))
        except UnicodeDecodeError:
            continue
        if len(pieces) >= count:
            return pieces[:count]
    raise AssertionError("the standard library has too little text")


@pytest.fixture(scope="module")
def text_folder(tmp_path_factory):
    """A user folder with real text in all three accepted formats."""
    folder = tmp_path_factory.mktemp("folder")
    pieces = stdlib_pieces(20_100, chars=300)
    (folder / "nested").mkdir()
    for i in range(50):
        (folder / "nested" / f"file_{i:02d}.txt").write_text("\n\n".join(pieces[i * 2:(i + 1) * 2]) + "\n")
    with open(folder / "docs.jsonl", "w") as f:
        for text in pieces[100:10_100]:
            f.write(json.dumps({"text": text, "id": 1}) + "\n")
    pq.write_table(pa.table({"text": pieces[10_100:], "n": list(range(10_000))}), folder / "docs.parquet")
    (folder / "ignored.md").write_text("not a source format")
    return folder


def split_texts(directory):
    return {split: {t for p in sorted((directory / split).glob("*.parquet"))
                    for t in pq.read_table(p).column("text").to_pylist()} for split in SPLITS}


def leftovers(cache):
    if not cache.exists():
        return []
    return sorted(p.name for p in cache.iterdir() if p.name.startswith((".staging", ".old")))


def test_folder_source_reads_every_format_and_is_deterministic(text_folder, tmp_path):
    first = prepare_track("test", source=str(text_folder), cache=tmp_path / "a", show_progress=False)
    assert not first.reused and first.spec["source"]["kind"] == "folder"
    texts = split_texts(first.directory)
    everything = set().union(*texts.values())
    jsonl_doc = json.loads((text_folder / "docs.jsonl").read_text().splitlines()[5])["text"]
    parquet_doc = pq.read_table(text_folder / "docs.parquet").column("text")[7].as_py()
    assert jsonl_doc in everything and parquet_doc in everything
    assert any("file_" not in t and t in (text_folder / "nested" / "file_03.txt").read_text() for t in everything)
    assert "not a source format" not in everything

    second = prepare_track("test", source=str(text_folder), cache=tmp_path / "b", show_progress=False)
    assert second.spec["fingerprint"] == first.spec["fingerprint"]
    assert second.spec["files"] == first.spec["files"]
    again = prepare_track("test", source=str(text_folder), cache=tmp_path / "a", show_progress=False)
    assert again.reused and again.spec == first.spec


def test_changed_data_changes_the_fingerprint(text_folder, tmp_path):
    folder = tmp_path / "folder"
    shutil.copytree(text_folder, folder)
    before = prepare_track("test", source=str(folder), cache=tmp_path / "c", show_progress=False)
    (folder / "nested" / "file_00.txt").write_text("a different document, so other data\n")
    after = prepare_track("test", source=str(folder), cache=tmp_path / "c", show_progress=False)
    assert not after.reused and after.spec["fingerprint"] != before.spec["fingerprint"]
    assert leftovers(tmp_path / "c") == []


def test_a_damaged_track_json_is_named_and_the_track_built_again(text_folder, tmp_path):
    built = prepare_track("test", source=str(text_folder), cache=tmp_path / "d", show_progress=False)
    assert built.track.files["val"][0].sha256 == built.spec["files"]["val"][0]["sha256"]
    path = built.directory / "track.json"
    damaged = {k: v for k, v in built.spec.items() if k != "tokenizer"}
    path.write_text(json.dumps(dict(damaged, track="nope")))
    with pytest.raises(PrepareError, match="is not a track.json this version reads") as refused:
        TrackSpec.read(path)
    assert "track: Value error, unknown track 'nope'" in str(refused.value)
    assert "tokenizer: Field required" in str(refused.value)
    again = prepare_track("test", source=str(text_folder), cache=tmp_path / "d", show_progress=False)
    assert not again.reused and again.spec["fingerprint"] == built.spec["fingerprint"]
    assert TrackSpec.read(path) == again.track


def test_splits_share_no_document(test_track):
    texts = split_texts(test_track.directory)
    assert all(texts[s] for s in SPLITS)
    assert not texts["train"] & texts["val"]
    assert not texts["train"] & texts["holdout"]
    assert not texts["val"] & texts["holdout"]


@pytest.mark.parametrize("make_bad, message", [
    (lambda d: None, "holds no .txt, .jsonl or .parquet files"),
    (lambda d: (d / "a.txt").write_bytes(b"caf\xe9 latin-1 text"), "is not UTF-8 text"),
    (lambda d: (d / "a.jsonl").write_text('{"text": "ok"}\n{"text": broken\n'), "a.jsonl:2 is not valid JSON"),
    (lambda d: (d / "a.jsonl").write_text('{"body": "no text field"}\n'), 'a.jsonl:1 has no string field "text"'),
    (lambda d: pq.write_table(pa.table({"content": ["x"]}), d / "a.parquet"),
     "has no 'text' column (columns: content)"),
    (lambda d: (d / "a.parquet").write_bytes(b"PAR1 this is not parquet"), "is not a readable parquet file"),
    (lambda d: (d / "a.txt").write_text("one small document\n"), "too small to split"),
])
def test_bad_folder_is_refused_and_leaves_nothing(tmp_path, make_bad, message):
    folder = tmp_path / "src"
    folder.mkdir()
    make_bad(folder)
    cache = tmp_path / "cache"
    with pytest.raises(PrepareError) as err:
        prepare_track("test", source=str(folder), cache=cache, show_progress=False)
    assert message in str(err.value)
    assert not (cache / "test").exists() and leftovers(cache) == []


def test_failed_reprepare_keeps_the_prepared_track(text_folder, tmp_path):
    cache = tmp_path / "cache"
    good = prepare_track("test", source=str(text_folder), cache=cache, show_progress=False)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.parquet").write_bytes(b"garbage")
    with pytest.raises(PrepareError):
        prepare_track("test", source=str(bad), cache=cache, show_progress=False)
    assert json.loads((cache / "test" / "track.json").read_text()) == good.spec
    assert Tokenizer.from_files(cache / "test" / "tokenizer").vocab_size == 1024
    assert leftovers(cache) == []


def test_other_bad_inputs_have_clear_errors(tmp_path):
    with pytest.raises(PrepareError, match="unknown track 'tpu': choose one of gpu, cpu, test"):
        prepare_track("tpu", cache=tmp_path)
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(PrepareError, match="is not a directory"):
        prepare_track("test", source=str(a_file), cache=tmp_path / "c")
    with pytest.raises(PrepareError, match="is not writable"):
        prepare_track("test", cache=a_file / "cache")
    with pytest.raises(PrepareError, match="--num-shards only applies to --source climbmix"):
        prepare_track("test", num_shards=2, cache=tmp_path / "c")
    with pytest.raises(PrepareError, match="unknown source 'nowhere'"):
        prepare_track("test", source="nowhere", cache=tmp_path / "c")


def test_tokenizer_built_for_other_data_is_refused(test_track, text_folder, tmp_path):
    other = prepare_track("test", source=str(text_folder), cache=tmp_path / "other", show_progress=False)
    mixed = tmp_path / "mixed"
    shutil.copytree(test_track.directory, mixed)
    shutil.rmtree(mixed / "tokenizer")
    shutil.copytree(other.directory / "tokenizer", mixed / "tokenizer")
    with pytest.raises(PrepareError, match="was built for another track or data"):
        Tokenizer.from_directory(mixed)


def test_workspace_refuses_data_with_another_fingerprint(test_track, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    shutil.copy(ROOT / "trainer" / "prepare.py", workspace)
    spec = dict(test_track.spec, fingerprint="0" * 64)
    (workspace / "track.json").write_text(json.dumps(spec))
    code = "import prepare; prepare.Tokenizer.from_directory()"
    env = dict(os.environ, AUTORESEARCH_CACHE=str(test_track.directory.parent))
    result = subprocess.run([sys.executable, "-c", code], cwd=workspace, env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "was created for 000000000000" in result.stderr and "not be comparable" in result.stderr

    (workspace / "track.json").write_text(json.dumps(test_track.spec))
    ok = subprocess.run([sys.executable, "-c", code + "; print(prepare.TRACK, prepare.MAX_SEQ_LEN)"],
                        cwd=workspace, env=env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == ["test", "128"]


def test_cli_prepare_reports_and_fails_clearly(test_track, tmp_path):
    cli = [sys.executable, "-m", "agent.cli", "prepare", "--track", "test"]
    done = subprocess.run([*cli, "--cache", str(test_track.directory.parent)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "track test already prepared" in done.stdout and test_track.spec["fingerprint"][:16] in done.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    failed = subprocess.run([*cli, "--source", str(empty), "--cache", str(tmp_path / "c")],
                            capture_output=True, text=True)
    assert failed.returncode == 2
    assert "holds no .txt, .jsonl or .parquet files" in failed.stdout
    script = subprocess.run([sys.executable, "-m", "trainer.tracks.builder", "--track", "nope"], cwd=ROOT,
                            capture_output=True, text=True)
    assert script.returncode == 2 and "unknown track 'nope'" in script.stdout
