"""Serves a trained model to trainer/evaluate.py, one batch of rows at a time.

    python -m trainer.model_server CHECKPOINT --device cpu|cuda

It runs train.py's code (the model contract: ``GPTConfig(**config)``, ``build_model(config,
device)``, ``model(inputs)`` returns logits), so it is untrusted: evaluate.py starts it in a
sandbox and checks what it answers. Protocol on stdin/stdout: a JSON line ``{"op": "losses" |
"logits", "rows": r, "cols": c}`` followed by r x c little-endian int32 tokens; the answer is a
JSON line ``{"shape": [...]}`` followed by that many little-endian float32 values: the
cross-entropy of ``rows[:, 1:]`` given ``rows[:, :-1]`` per token, or the logits themselves.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import nullcontext
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    args = parser.parse_args(argv)
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # whatever train.py prints goes to the log, never into the answers
    sys.path.insert(0, str(Path.cwd()))  # the exported commit's train.py

    import numpy as np
    import torch
    import train

    state = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
    if not state.get("config"):
        print(f"{args.checkpoint} has no model config: the model must keep its dataclass `config`")
        return 2
    device = torch.device(args.device)
    model = train.build_model(train.GPTConfig(**state["config"]), device)
    model.load_state_dict(state["state_dict"])
    model.eval()
    autocast = torch.amp.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()
    last = None  # the logits of the last `losses` batch, for `picked`
    while header := requests.readline():
        request = json.loads(header)
        count, cols = int(request["rows"]), int(request["cols"])
        values = torch.from_numpy(np.frombuffer(requests.read(4 * count * cols), dtype="<i4")
                                  .reshape(count, cols).astype(np.int64)).to(device)
        if request["op"] == "picked":
            out = last.gather(1, values.unsqueeze(-1).expand(-1, -1, last.size(-1)))
        else:
            with torch.no_grad(), autocast:
                logits = model(values[:, :-1]).float()
            if request["op"] == "losses":
                last = logits
                out = torch.nn.functional.cross_entropy(logits.flatten(0, 1), values[:, 1:].flatten(),
                                                        reduction="none").view(count, cols - 1)
            else:
                out = logits
        answer = out.cpu().numpy().astype("<f4")
        answers.write(json.dumps({"shape": list(answer.shape)}).encode() + b"\n")
        answers.write(answer.tobytes())
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
