"""How the trusted evaluator lays out its batches: every batch the same size, every scored row once,
probes of rows scored in other batches placed among them."""

import secrets

import numpy as np
import pytest

from trainer.evaluate import BATCH_ROWS, PROBES_PER_BATCH, batch_layout, plan_batches


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
