from pathlib import Path

import pytest

TRAINER = Path(__file__).resolve().parents[2] / "trainer"


@pytest.fixture(scope="module")
def train(test_track):
    """trainer/train.py imported as a module (its `prepare` is the test track's)."""
    import importlib.util
    import sys
    sys.path.insert(0, str(TRAINER))
    spec = importlib.util.spec_from_file_location("train_under_test", TRAINER / "train.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # torch.compile looks a function's module up by name
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]
    sys.path.remove(str(TRAINER))
