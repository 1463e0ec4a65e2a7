"""Where a run asked for its seal, in its capped log: what came before is exactly the start of the file a proposer
may read, whether the seal fell in the head, in the kept tail or in the part cut out between them."""

import os
import time

import pytest

from trainer.sandbox.untrusted import CappedLog


def written_through(path, chunks, seal_after: int | None, head=100, tail=50) -> tuple[bytes, CappedLog]:
    """chunks written into a pipe the CappedLog reads; the seal marked once seal_after chunks were read."""
    read_end, write_end = os.pipe()
    source = os.fdopen(read_end, "rb")
    log = CappedLog(source, path, head=head, tail=tail)
    sent = 0
    for number, chunk in enumerate(chunks):
        if number == seal_after:
            while log.received < sent:
                time.sleep(0.005)
            log.mark_seal()
        os.write(write_end, chunk)
        sent += len(chunk)
    os.close(write_end)
    log.close()
    source.close()
    return b"".join(chunks), log


@pytest.mark.parametrize("seal_after, where", [(1, "head"), (6, "cut"), (9, "tail"), (None, "never")])
def test_the_bytes_before_the_seal_are_the_start_of_the_file(seal_after, where, tmp_path):
    chunks = [f"line {n:02d} ".encode() * 3 + b"\n" for n in range(10)]  # 28 bytes each, 280 in all
    stream, log = written_through(tmp_path / "run.log", chunks, seal_after)
    file = (tmp_path / "run.log").read_bytes()
    shown = log.shown_bytes()
    before = stream[:sum(len(c) for c in chunks[:seal_after])] if seal_after is not None else stream
    if where == "head":
        assert file[:shown] == before
    elif where == "cut":  # the seal fell in what the cap left out: the head alone, nothing after it
        assert shown == 100 and file[:shown] == stream[:100]
    elif where == "tail":  # the file keeps the stream's last 50 bytes behind the cut line
        first_kept = len(stream) - 50
        assert b"[runner] cut " in file[:shown] and file[:shown].endswith(stream[first_kept:len(before)])
        assert file[shown:] == stream[len(before):]
    else:
        assert shown == len(file)
    assert b"line 09" not in file[:shown] or where == "never"
