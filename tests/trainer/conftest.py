import secrets
import shutil
from pathlib import Path

import pytest

from trainer.sandbox.untrusted import runs_root

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


@pytest.fixture
def place(tmp_path):
    """Where a run happens and what it leaves: a run directory under the runs root, a log, weights."""
    parent = runs_root() / f"run-path-{secrets.token_hex(4)}"
    yield dict(run_dir=parent / "0000", log_path=tmp_path / "logs" / "0000.log",
               checkpoint_destination=tmp_path / "checkpoints" / "0000.pt")
    shutil.rmtree(parent, ignore_errors=True)
