"""Setting train.py's hyperparameter block for a track."""

import ast
from pathlib import Path

import pytest

from trainer.prepare import TRACKS
from trainer.tracks.hyperparameters import (
    TRACK_HYPERPARAMETERS,
    BlockError,
    set_hyperparameters,
    train_source_for_track,
)

SOURCE = (Path(__file__).resolve().parents[2] / "trainer" / "train.py").read_text()


def assigned(source):
    """UPPER_CASE names bound at top level to constant expressions (like 2**19), with their values."""
    values = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id.isupper():
            try:
                code = compile(ast.Expression(node.value), "<block>", "eval")
                values[node.targets[0].id] = eval(code, {"__builtins__": {}, "float": float})
            except Exception:
                continue
    return values


@pytest.mark.parametrize("track", list(TRACKS))
def test_every_track_has_a_block_and_only_its_values_change(track):
    result = train_source_for_track(SOURCE, track)
    before, after = assigned(SOURCE), assigned(result)
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {k for k, v in TRACK_HYPERPARAMETERS[track].items() if before[k] != v}
    assert all(after[k] == v for k, v in TRACK_HYPERPARAMETERS[track].items())
    assert f"# === HYPERPARAMETERS (track: {track})" in result
    assert len(result.splitlines()) == len(SOURCE.splitlines())


def test_values_outside_the_block_cannot_be_set():
    with pytest.raises(BlockError, match="LOGIT_SOFTCAP is assigned 0 times"):
        set_hyperparameters(SOURCE, {"LOGIT_SOFTCAP": 30.0})
    with pytest.raises(BlockError, match="NOT_A_NAME is assigned 0 times"):
        set_hyperparameters(SOURCE, {"NOT_A_NAME": 1})


def test_malformed_blocks_are_refused():
    twice = SOURCE.replace("DEPTH = 8 ", "DEPTH = 8\nDEPTH = 9 ", 1)
    with pytest.raises(BlockError, match="DEPTH is assigned 2 times"):
        set_hyperparameters(twice, {"DEPTH": 4})
    with pytest.raises(BlockError, match="has no '# === HYPERPARAMETERS"):
        set_hyperparameters(SOURCE.replace("# === END HYPERPARAMETERS", "# end"), {"DEPTH": 4})
    with pytest.raises(BlockError, match="no hyperparameters for track 'tpu'"):
        train_source_for_track(SOURCE, "tpu")


def test_non_finite_and_string_values_are_written_as_python():
    result = set_hyperparameters(SOURCE, {"UNEMBEDDING_LR": float("nan"), "WINDOW_PATTERN": "SL"})
    assert 'UNEMBEDDING_LR = float("nan")' in result and 'WINDOW_PATTERN = "SL"' in result
    ast.parse(result)
