"""How the trusted evaluator lays out its batches: every batch the same size, every scored row once,
probes of rows scored in other batches placed among them."""

import secrets

import numpy as np

from trainer.evaluate import BATCH_ROWS, PROBES_PER_BATCH, plan_batches


def test_every_batch_has_the_ordinary_size_and_carries_probes_of_other_batches_rows():
    rows = np.random.default_rng(0).integers(0, 1000, size=(100, 129))
    plan = plan_batches(rows, secrets.SystemRandom())

    assert all(len(scored) + len(probes) == BATCH_ROWS for scored, probes in plan)
    assert all(len(probes) >= PROBES_PER_BATCH for _, probes in plan)
    assert sorted(i for scored, _ in plan for i in scored) == list(range(100))
    originals = [p.original for _, probes in plan for p in probes]
    assert len(originals) == len(set(originals))
    for scored, probes in plan:
        for probe in probes:
            assert probe.original not in scored
            t = probe.position
            assert 0 < t < rows.shape[1] - 1
            assert (probe.row[:t + 1] == rows[probe.original][:t + 1]).all()  # the logits at t see these
            assert probe.row[t + 1] != rows[probe.original][t + 1]            # and a lookahead sees this
