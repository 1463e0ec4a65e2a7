"""The harness's own evaluation of a trained model, from the weights its run saved.

Run from an exported commit (train.py and the frozen prepare.py as cwd) in a fresh process:

    python -m trainer.evaluate CHECKPOINT --splits val,holdout [--probe]

It lives in the project, not the workspace, so train.py can neither import nor patch it.
The metric functions and the data readers are taken before train.py is imported; the model is
rebuilt through train.py's model contract (``GPTConfig(**config)``, ``build_model(config,
device)``, ``model(inputs)`` returns logits) and loaded with the saved weights. Bits per byte
are computed here from the logits, over the same rows evaluate_bpb scores. ``--probe`` also
measures how much the logits at positions <= t move when tokens after t are replaced: a model
that looks ahead moves them. The last line printed is ``EVALUATION {json}``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from contextlib import nullcontext
from pathlib import Path

RESULT_PREFIX = "EVALUATION "
BATCH_ROWS = 16
PROBE_ROWS = 4


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--splits", default="val,holdout", help="comma-separated: val, holdout")
    parser.add_argument("--probe", action="store_true", help="also run the causality probe")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path.cwd()))  # the exported commit's train.py and prepare.py

    import torch
    cross_entropy = torch.nn.functional.cross_entropy  # held before train.py can touch anything

    import prepare
    data = Data(prepare)
    tokenizer = prepare.Tokenizer.from_directory()

    import train

    state = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
    if not state.get("config"):
        print(f"{args.checkpoint} has no model config: the model must keep its dataclass `config`")
        return 2
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    model = train.build_model(train.GPTConfig(**state["config"]), device)
    model.load_state_dict(state["state_dict"])
    model.eval()
    autocast = torch.amp.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()
    out: dict = dict(device=device.type)
    with torch.no_grad(), autocast:
        for split in args.splits.split(","):
            out[split] = bits_per_byte(model, tokenizer, data, split, device, cross_entropy)
            print(f"{split}: {out[split]:.6f}", flush=True)
        if args.probe:
            out["lookahead"] = lookahead(model, tokenizer, data, device, state["config"]["vocab_size"])
            print(f"lookahead: {out['lookahead']:.3g}", flush=True)
    print(RESULT_PREFIX + json.dumps(out))
    return 0


class Data:
    """prepare.py's data readers and constants, taken once."""

    def __init__(self, prepare):
        self.packer, self.documents, self.files = prepare.BestFitPacker, prepare.iter_documents, prepare.split_files
        self.rows, self.seq_len = prepare.EVAL_TOKENS // prepare.MAX_SEQ_LEN, prepare.MAX_SEQ_LEN

    def packed(self, tokenizer, split: str):
        return self.packer(tokenizer, self.documents(self.files(split)), self.seq_len + 1)


def bits_per_byte(model, tokenizer, data: Data, split: str, device, cross_entropy) -> float:
    """The track's metric: nats over targets that are real bytes / (ln 2 x their bytes)."""
    import torch
    token_bytes = torch.from_numpy(tokenizer.token_bytes.astype("int64")).to(device)
    packer = data.packed(tokenizer, split)
    nats = torch.zeros((), dtype=torch.float64, device=device)
    total_bytes = torch.zeros((), dtype=torch.int64, device=device)
    for start in range(0, data.rows, BATCH_ROWS):
        rows = torch.from_numpy(packer.rows(min(BATCH_ROWS, data.rows - start)).astype("int64")).to(device)
        inputs, targets = rows[:, :-1], rows[:, 1:]
        logits = model(inputs).float()
        loss = cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="none")
        nbytes = token_bytes[targets].reshape(-1)
        nats += (loss.double() * (nbytes > 0)).sum()
        total_bytes += nbytes.sum()
    return nats.item() / (math.log(2) * total_bytes.item())


def lookahead(model, tokenizer, data: Data, device, vocab_size: int) -> float:
    """The largest change of a logit at positions <= t when every token after t is replaced."""
    import torch
    inputs = torch.from_numpy(data.packed(tokenizer, "val").rows(PROBE_ROWS).astype("int64")).to(device)[:, :-1]
    worst = 0.0
    generator = torch.Generator().manual_seed(0)
    for t in (0, inputs.size(1) // 2, inputs.size(1) - 2):
        changed = inputs.clone()
        changed[:, t + 1:] = torch.randint(vocab_size, changed[:, t + 1:].shape, generator=generator).to(device)
        before, after = model(inputs).float()[:, :t + 1], model(changed).float()[:, :t + 1]
        worst = max(worst, (before - after).abs().max().item())
    return worst


if __name__ == "__main__":
    sys.exit(main())
