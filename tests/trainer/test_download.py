"""trainer.tracks.download against a real loopback HTTP server serving real parquet shards."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

from tests.helpers.shard_server import ShardServer, parquet_shard, sha256_hex
from trainer.prepare import PrepareError
from trainer.tracks.download import download_shards, shard_name, shard_url

FAST = dict(backoff_seconds=0.01, show_progress=False)


@pytest.fixture(scope="module")
def shards() -> dict[str, bytes]:
    return {shard_name(i): parquet_shard(seed=i) for i in range(4)}


@pytest.fixture
def server():
    with ShardServer() as server:
        yield server


def leftovers(dest) -> list[str]:
    return sorted(p.name for p in dest.glob("*.part"))


def test_shards_are_large_enough_for_mid_file_drops(shards):
    assert all(len(data) >= 100_000 for data in shards.values())
    assert len(set(shards.values())) == len(shards)


def test_parallel_download_survives_503s_and_resumes_dropped_connections(tmp_path, server, shards):
    for i, (name, data) in enumerate(shards.items()):
        server.add(name, data, unavailable=2, drops=2, etag=i % 2 == 0)

    paths = download_shards(list(shards), tmp_path, endpoint=server.endpoint, workers=4, **FAST)

    assert paths == [tmp_path / name for name in shards]
    for name, data in shards.items():
        assert (tmp_path / name).read_bytes() == data
        log = server.requests(name)
        assert [r.status for r in log] == [503, 503, 200, 206, 206]
        assert [r.dropped for r in log[2:]] == [True, True, False]
        for previous, resumed in pairwise(log[2:]):
            assert resumed.start == previous.start + previous.sent > 0
            assert resumed.range == f"bytes={resumed.start}-"
    assert leftovers(tmp_path) == []


def test_permanently_failing_shard_names_its_url_and_leaves_nothing(tmp_path, server, shards):
    good, bad = shard_name(0), shard_name(1)
    server.add(good, shards[good], drops=1)
    server.add(bad, shards[bad], drops=2, broken=True)

    with pytest.raises(PrepareError) as failure:
        download_shards([bad, good], tmp_path, endpoint=server.endpoint, attempts=4, **FAST)

    assert shard_url(bad, server.endpoint) in str(failure.value)
    assert shard_url(good, server.endpoint) not in str(failure.value)
    assert [r.status for r in server.requests(bad)] == [200, 206, 503, 503]
    assert not (tmp_path / bad).exists()
    assert (tmp_path / good).read_bytes() == shards[good]
    assert leftovers(tmp_path) == []


def test_download_whose_sha256_differs_from_the_etag_is_rejected(tmp_path, server, shards):
    name = shard_name(2)
    server.add(name, shards[name], drops=1, etag=sha256_hex(b"something else"))

    with pytest.raises(PrepareError, match="sha256") as failure:
        download_shards([name], tmp_path, endpoint=server.endpoint, attempts=3, **FAST)

    assert shard_url(name, server.endpoint) in str(failure.value)
    assert len(server.requests(name)) == 3
    assert list(tmp_path.iterdir()) == []


def test_missing_shard_fails_at_once_without_retries(tmp_path, server):
    name = shard_name(3)

    with pytest.raises(PrepareError, match="404") as failure:
        download_shards([name], tmp_path, endpoint=server.endpoint, attempts=6, **FAST)

    assert shard_url(name, server.endpoint) in str(failure.value)
    assert [r.status for r in server.requests(name)] == [404]
    assert list(tmp_path.iterdir()) == []


def test_complete_shard_is_kept_and_truncated_one_is_replaced(tmp_path, server, shards):
    present, truncated = shard_name(0), shard_name(1)
    for name, data in shards.items():
        server.add(name, data)
    (tmp_path / present).write_bytes(shards[present])
    (tmp_path / truncated).write_bytes(shards[truncated][: len(shards[truncated]) - 1000])

    download_shards([present, truncated], tmp_path, endpoint=server.endpoint, **FAST)

    assert server.requests(present) == []
    assert [r.status for r in server.requests(truncated)] == [200]
    assert (tmp_path / present).read_bytes() == shards[present]
    assert (tmp_path / truncated).read_bytes() == shards[truncated]


def test_hf_endpoint_is_used_when_no_endpoint_is_given(tmp_path, server, shards, monkeypatch):
    name = shard_name(0)
    server.add(name, shards[name])
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint + "/")

    download_shards([name], tmp_path, **FAST)

    assert len(server.requests(name)) == 1
    assert (tmp_path / name).read_bytes() == shards[name]


def test_prepare_track_from_climbmix_served_over_http(tmp_path, server, monkeypatch):
    from trainer.tracks.builder import prepare_track

    splits = {"train": [shard_name(0), shard_name(1)], "val": ["shard_06542.parquet"],
              "holdout": ["shard_06541.parquet"]}
    served = {}
    for seed, name in enumerate(name for names in splits.values() for name in names):
        served[name] = parquet_shard(seed=100 + seed, docs=3000, chars=(100, 400))
        server.add(name, served[name])
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)

    prepared = prepare_track("test", source="climbmix", num_shards=2, cache=tmp_path / "cache",
                             show_progress=False)

    track_dir = tmp_path / "cache" / "test"
    assert prepared.directory == track_dir
    spec = json.loads((track_dir / "track.json").read_text())
    assert spec["source"]["kind"] == "climbmix"
    for split, names in splits.items():
        assert [(e["name"], e["sha256"]) for e in spec["files"][split]] == \
               [(name, sha256_hex(served[name])) for name in names]
        for name in names:
            assert (track_dir / split / name).read_bytes() == served[name]
    assert sorted(r.name for r in server.log) == sorted(served)
