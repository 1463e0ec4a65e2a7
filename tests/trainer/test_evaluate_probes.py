"""How the trusted evaluator lays out its batches: every batch the same size, every scored row once,
probes of rows scored in other batches placed among them."""

import secrets

import numpy as np
import pytest

from trainer.evaluator.evaluate import BATCH_ROWS, PROBES_PER_BATCH, batch_layout, main, plan_batches


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_batch_has_the_ordinary_size_and_carries_probes_of_other_batches_rows(device):
    batch_rows, probes_per_batch = batch_layout(device)
    rows = np.random.default_rng(0).integers(0, 1000, size=(100 if device == "cpu" else 1000, 129))
    plan = plan_batches(rows, secrets.SystemRandom(), batch_rows, probes_per_batch)

    assert all(len(scored) + len(probes) == batch_rows for scored, probes in plan)
    assert all(len(probes) >= probes_per_batch for _, probes in plan)
    assert sorted(i for scored, _ in plan for i in scored) == list(range(len(rows)))
    originals = [p.original for _, probes in plan for p in probes]
    assert len(originals) == len(set(originals))
    for scored, probes in plan:
        for probe in probes:
            assert probe.original not in scored
            t = probe.position
            assert 0 < t < rows.shape[1] - 1
            assert (probe.row[:t + 1] == rows[probe.original][:t + 1]).all()  # the logits at t see these
            assert probe.row[t + 1] != rows[probe.original][t + 1]            # and a lookahead sees this


def test_on_cuda_batches_are_larger_with_probes_in_the_same_share():
    """Each batch's fresh model process starts CUDA anew: fewer, larger batches amortise it."""
    assert batch_layout("cpu") == (BATCH_ROWS, PROBES_PER_BATCH)
    rows, probes = batch_layout("cuda")
    assert rows > BATCH_ROWS and probes / rows == PROBES_PER_BATCH / BATCH_ROWS


@pytest.mark.parametrize(("device", "rows", "probes"), [("cpu", 8, 1), ("cpu", 2, 1), ("cuda", 64, 8)])
def test_a_smaller_batch_keeps_probes_in_every_batch(device, rows, probes):
    """--batch-rows: the weights of a run that ran out of memory are scored in smaller batches, each with probes."""
    assert batch_layout(device, rows) == (rows, probes)
    data = np.random.default_rng(0).integers(0, 1000, size=(40, 129))
    plan = plan_batches(data, secrets.SystemRandom(), rows, probes)
    assert all(len(scored) + len(batch_probes) == rows and batch_probes for scored, batch_probes in plan)
    assert sorted(i for scored, _ in plan for i in scored) == list(range(len(data)))


def test_a_batch_too_small_for_a_probe_is_refused_saying_so(capsys):
    with pytest.raises(ValueError, match="at least 2 rows"):
        batch_layout("cpu", 1)
    with pytest.raises(SystemExit):
        main(["weights.pt", "--splits", "val", "--batch-rows", "1"])
    assert "--batch-rows must be at least 2" in capsys.readouterr().err
