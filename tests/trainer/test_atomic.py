"""Atomic small-file writes, from several threads of one process at once."""

import threading

from trainer.files.atomic import read_json, write_json_atomic


def test_concurrent_writes_of_one_file_from_one_process_never_collide(tmp_path):
    target, errors = tmp_path / "heartbeat.json", []

    def write_many(writer: int) -> None:
        try:
            for n in range(300):
                write_json_atomic(target, {"writer": writer, "n": n})
        except Exception as err:  # an os.replace of a temp file another thread already moved away
            errors.append(err)

    threads = [threading.Thread(target=write_many, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert read_json(target)["n"] == 299
    assert [p.name for p in tmp_path.iterdir()] == ["heartbeat.json"]  # no temp file left behind
    assert target.stat().st_mode & 0o777 == 0o644  # readable by the other side of a shared spool
