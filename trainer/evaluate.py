"""Scores a trained model again from the weights its run saved, on any split.

Run from an exported commit (train.py and the frozen prepare.py, cwd) as
``python -m trainer.evaluate CHECKPOINT --splits val,holdout``. The model is rebuilt through
train.py's model contract (``GPTConfig(**config)`` and ``build_model(config, device)``), the
weights are loaded, and each split is scored by prepare.evaluate_bpb. The last line printed is
``EVALUATION {"val": ..., "holdout": ...}``. This process, not train.py, reads the holdout split.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import nullcontext
from pathlib import Path

RESULT_PREFIX = "EVALUATION "


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--splits", default="val,holdout", help="comma-separated: val, holdout")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path.cwd()))  # the exported commit's train.py and prepare.py

    import torch
    import train

    import prepare

    state = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
    if not state.get("config"):
        print(f"{args.checkpoint} has no model config: the model's class must keep a dataclass `config`")
        return 2
    device = train.pick_device()
    model = train.build_model(train.GPTConfig(**state["config"]), device)
    model.load_state_dict(state["state_dict"])
    model.eval()
    autocast = torch.amp.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()
    tokenizer = prepare.Tokenizer.from_directory()
    scores = {}
    for split in args.splits.split(","):
        with autocast:
            scores[split] = prepare.evaluate_bpb(model, tokenizer, train.DEVICE_BATCH_SIZE, split=split)
        print(f"{split}: {scores[split]:.6f}", flush=True)
    print(RESULT_PREFIX + json.dumps(scores))
    return 0


if __name__ == "__main__":
    sys.exit(main())
