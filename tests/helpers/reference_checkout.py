"""A checkout made as the reference autoresearch loop leaves one: experiments committed on autoresearch/<tag>, a
discard or crash reset away (its commit an unreachable object), results.tsv untracked beside them."""

from __future__ import annotations

from pathlib import Path

import git

PROGRAM = Path(__file__).resolve().parents[2] / "prompts" / "program.md"
TRAINER = Path(__file__).resolve().parents[2] / "trainer"
REFERENCE_PREPARE = '''"""One-time data preparation (the reference's shape: its constants, nothing else here)."""
MAX_SEQ_LEN = {seq}       # context length
TIME_BUDGET = 300        # training time budget in seconds (5 minutes)
EVAL_TOKENS = 40 * 524288  # number of tokens for val eval
CACHE_DIR = "~/.cache/autoresearch"
VOCAB_SIZE = 8192
'''
REFERENCE_TRAIN = '''from prepare import MAX_SEQ_LEN, TIME_BUDGET, Tokenizer, make_dataloader, evaluate_bpb
DEPTH = 8
MATRIX_LR = 0.04
WARMDOWN_RATIO = 0.5
model = None  # the reference builds and trains its model at the top level
'''
HEADER = "commit\tval_bpb\tmemory_gb\tstatus\tdescription\n"


class Checkout:
    """A git checkout like the reference loop's: experiments are committed on autoresearch/<tag>; a discard or a
    crash is reset away, so its commit is an unreachable object."""

    def __init__(self, path: Path, train: str = REFERENCE_TRAIN, seq: int = 2048, tag: str = "dec4"):
        self.path = path
        self.repo = git.Repo.init(path, initial_branch="master")
        with self.repo.config_writer() as config:
            config.set_value("user", "name", "researcher")
            config.set_value("user", "email", "researcher@localhost")
        (path / "prepare.py").write_text(REFERENCE_PREPARE.format(seq=seq))
        (path / "train.py").write_text(train)
        self.repo.index.add(["prepare.py", "train.py"])
        self.repo.index.commit("initial")
        self.repo.git.checkout("-b", f"autoresearch/{tag}")
        self.rows: list[str] = []

    def experiment(self, old: str, new: str, message: str) -> str:
        train = self.path / "train.py"
        train.write_text(train.read_text().replace(old, new))
        self.repo.index.add(["train.py"])
        return self.repo.index.commit(message).hexsha

    def reset_to(self, commit: str) -> None:
        self.repo.git.reset("--hard", commit)

    def row(self, commit: str, val_bpb: float, memory_gb: float, status: str, description: str) -> None:
        self.rows.append(f"{commit[:7]}\t{val_bpb:.6f}\t{memory_gb:.1f}\t{status}\t{description}\n")

    def write_results(self, extra: str = "") -> None:
        (self.path / "results.tsv").write_text(HEADER + "".join(self.rows) + extra)


def reference_night(path: Path, train: str = REFERENCE_TRAIN) -> tuple[Checkout, dict[str, str]]:
    """baseline, keep, discard (reset away), crash (reset away), a row whose commit is gone, keep."""
    checkout = Checkout(path, train)
    commits = {"baseline": checkout.repo.head.commit.hexsha}
    checkout.row(commits["baseline"], 0.997900, 44.0, "keep", "baseline")
    commits["keep1"] = checkout.experiment("MATRIX_LR = 0.04", "MATRIX_LR = 0.05", "raise matrix lr")
    checkout.row(commits["keep1"], 0.993100, 44.0, "keep", "raise matrix lr to 0.05")
    commits["discard"] = checkout.experiment("DEPTH = 8", "DEPTH = 12", "deeper")
    checkout.reset_to(commits["keep1"])
    checkout.row(commits["discard"], 0.995500, 60.2, "discard", "depth 12")
    commits["crash"] = checkout.experiment("DEPTH = 8", "DEPTH = 64", "much deeper")
    checkout.reset_to(commits["keep1"])
    checkout.row(commits["crash"], 0.0, 0.0, "crash", "depth 64 (OOM)")
    checkout.row("0badc0d", 0.996000, 44.1, "discard", "a commit lost since")
    commits["keep2"] = checkout.experiment("WARMDOWN_RATIO = 0.5", "WARMDOWN_RATIO = 0.6", "longer warmdown")
    checkout.row(commits["keep2"], 0.990200, 44.0, "keep", "warmdown 0.6")
    checkout.write_results()
    return checkout, commits
