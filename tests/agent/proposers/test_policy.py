"""check_policy on the real train.py: what it lets through, and each rule naming the line it breaks."""

import ast
from pathlib import Path

import pytest

from agent.proposers.edits import EditRejected
from agent.proposers.policy import _walk, check_policy

TRAIN = (Path(__file__).resolve().parents[3] / "trainer" / "train.py").read_text()
TRAIN_LINES = TRAIN.splitlines()
IMPORT_LINE = ("from prepare import BUDGET_CLOCK, MAX_SEQ_LEN, STEP_BUDGET, TIME_BUDGET, Tokenizer, evaluate_bpb, "
               "make_dataloader")
EVALUATE_LINE = "        val_bpb = evaluate_bpb(train_model, tokenizer, DEVICE_BATCH_SIZE)"
LOADER_LINE = '    train_loader = make_dataloader(tokenizer, DEVICE_BATCH_SIZE, MAX_SEQ_LEN, "train", device=device)'
HELD_OUT = "train.py may not read validation or holdout data"
OUTSIDE_RUN_DIR = "files may only be written inside the run directory, through a relative literal path"


def appended(code: str) -> tuple[str, int]:
    """train.py with code added at module level, and the line number of code's first line."""
    return TRAIN + "\n" + code + "\n", len(TRAIN_LINES) + 2


def replaced(old_line: str, new_line: str) -> tuple[str, int]:
    """train.py with one whole line replaced, and that line's number."""
    number = TRAIN_LINES.index(old_line) + 1
    lines = list(TRAIN_LINES)
    lines[number - 1] = new_line
    return "\n".join(lines) + "\n", number


def rejection(source: str) -> str:
    with pytest.raises(EditRejected) as info:
        check_policy(source)
    return str(info.value)


def test_the_real_train_py_passes():
    check_policy(TRAIN)


@pytest.mark.parametrize("source", [
    replaced("DEPTH = 8                  # transformer blocks", "DEPTH = 12")[0],
    appended('def budget_fraction(seconds):\n    """The share of prepare.py\'s TIME_BUDGET that seconds is."""\n'
             "    return seconds / TIME_BUDGET")[0],
    appended('Path("checkpoints").mkdir(exist_ok=True)\ntorch.save(model.state_dict(), "checkpoints/last.pt")\n'
             'with open("notes/run.log", "a") as log:\n    log.write("done")')[0],
    appended('with open("/etc/hostname") as f:\n    f.read()')[0],
], ids=["depth changed", "helper with a docstring naming prepare.py", "writes inside the run directory",
        "reading a file"])
def test_harmless_changes_pass(source):
    check_policy(source)


APPENDED_VIOLATIONS = [
    ("import socket", "import of socket is not allowed"),
    ("import subprocess", "import of subprocess is not allowed"),
    ("from urllib import request", "import from urllib is not allowed"),
    ("import importlib", "import of importlib is not allowed"),
    ("import prepare", "import the names you need from prepare (from prepare import ...), not the module"),
    ("evaluate_bpb = lambda *args: 0.5", "evaluate_bpb comes from prepare.py and may not be redefined"),
    ("def evaluate_bpb(model, tokenizer, batch_size):\n    return 0.5",
     "evaluate_bpb comes from prepare.py and may not be redefined"),
    ("Tokenizer.encode = lambda self, text: []", "Tokenizer comes from prepare.py and may not be changed"),
    ('os.system("x")', "os.system() is not allowed"),
    ('eval("1")', "eval() is not allowed"),
    ('__import__("os")', "__import__() is not allowed"),
    ('sys.modules["x"] = None', "sys.modules may not be used"),
    ('SPLIT = "holdout"', f"'holdout': {HELD_OUT}"),
    ('open("prepare.py").read()', "'prepare.py': prepare.py and track.json are frozen"),
    ('open("/etc/passwd", "w")', OUTSIDE_RUN_DIR),
    ('open("../results.tsv", "a")', OUTSIDE_RUN_DIR),
    ('torch.save(model.state_dict(), "/tmp/x.pt")', OUTSIDE_RUN_DIR),
    ('Path("/tmp/x").write_text("y")', OUTSIDE_RUN_DIR),
    ('np.save("/tmp/a.npy", 1)', OUTSIDE_RUN_DIR),
    ('getattr(os, "sys" + "tem")', "getattr() needs a literal attribute name"),
    ("from os import *", "star imports are not allowed: import names explicitly"),
    ("import posix", "import of posix is not allowed"),
    ("import builtins", "import of builtins is not allowed"),
    ('locals()["evaluate_bpb"] = None', "locals() is not allowed"),
    ("frame = sys._getframe()", "._getframe may not be used"),
    ("from sys import modules", "sys.modules may not be used"),
    ("T = Tokenizer", "Tokenizer from prepare.py may only be called (or its attributes read), not passed around"),
    ("setter = type.__setattr__", ".__setattr__ may not be used"),
]


@pytest.mark.parametrize(("code", "rule"), APPENDED_VIOLATIONS, ids=[code for code, _ in APPENDED_VIOLATIONS])
def test_an_appended_violation_is_rejected_naming_its_line_and_rule(code, rule):
    source, line = appended(code)
    header, *listed = rejection(source).splitlines()
    assert header == "train.py breaks the sandbox policy:"
    assert len(listed) == 1
    assert listed[0].startswith(f"- line {line}: {rule}")


REPLACED_VIOLATIONS = [
    (IMPORT_LINE, IMPORT_LINE + ", split_files",
     ["prepare.split_files is not part of what train.py may use (BUDGET_CLOCK, EVAL_TOKENS, MAX_SEQ_LEN"]),
    (LOADER_LINE, "    train_loader = make_dataloader(tokenizer, 8, 128, \"val\")",
     ['make_dataloader() must read the "train" split, written as that literal', f"'val': {HELD_OUT}"]),
    (EVALUATE_LINE, '        val_bpb = evaluate_bpb(model, tokenizer, 8, split="holdout")',
     ["evaluate_bpb() may not be pointed at another split or data directory", f"'holdout': {HELD_OUT}"]),
]


@pytest.mark.parametrize(("old", "new", "rules"), REPLACED_VIOLATIONS, ids=["split_files", "val loader",
                                                                          "holdout evaluation"])
def test_a_replaced_line_is_rejected_naming_its_line_and_every_rule_it_breaks(old, new, rules):
    source, line = replaced(old, new)
    listed = rejection(source).splitlines()[1:]
    assert len(listed) == len(rules)
    for rule in rules:
        assert any(entry.startswith(f"- line {line}: {rule}") for entry in listed), (rule, listed)


def test_several_violations_are_listed_in_one_message_in_line_order():
    source, line = appended('SPLIT = "holdout"\nimport socket\nos.system("x")')
    assert rejection(source).splitlines() == [
        "train.py breaks the sandbox policy:",
        f"- line {line}: 'holdout': {HELD_OUT}; evaluate_bpb in prepare.py scores the model",
        f"- line {line + 1}: import of socket is not allowed (no network, processes or dynamic loading)",
        f"- line {line + 2}: os.system() is not allowed",
    ]


def test_rules_do_not_depend_on_where_the_import_is():
    source = "def cheat():\n    global evaluate_bpb\n    evaluate_bpb = lambda *a: 0.1\n\n\n" + TRAIN
    assert "- line 3: evaluate_bpb comes from prepare.py and may not be redefined" in rejection(source)


@pytest.mark.parametrize("code,written", [
    ("F.cross_entropy = lambda *args, **kwargs: 0.0", "F.cross_entropy"),
    ("torch.nn.functional.cross_entropy = None", "torch.nn.functional.cross_entropy"),
    ("nn.Module.__call__ = None", "nn.Module.__call__"),
    ("del torch.tanh", "torch.tanh"),
    ("math.log, x = abs, 1", "math.log"),
])
def test_assigning_to_what_train_py_imports_is_rejected(code, written):
    source, line = appended(code)
    assert f"- line {line}: {written}: train.py may not assign to what it imports" in rejection(source)


def test_torch_settings_may_be_assigned():
    check_policy(appended("torch.backends.cudnn.benchmark = True\ntorch._inductor.config.coordinate_descent_tuning = "
                          "True")[0])


# Ways around the rules that a model rewarded for a lower number tries, each appended to the real train.py.
EVASIONS = [
    ('getattr(os, "system")("id")', "getattr(..., 'system') reaches what train.py may not use"),
    ('run = getattr(os, "popen")', "getattr(..., 'popen') reaches what train.py may not use"),
    ('g = getattr(model, "__globals__")', "getattr(..., '__globals__') reaches what train.py may not use"),
    ("g = getattr\ng(os, 'system')", "getattr may only be called directly"),
    ("evaluate = eval", "eval may only be called directly"),
    ('target = Path("/tmp/x")\ntarget.write_text("y")', OUTSIDE_RUN_DIR),
    ('target = Path.home() / "x"\ntarget.touch()', OUTSIDE_RUN_DIR),
    ('target = Path("/tmp")\nwith target.open("w") as f:\n    pass', OUTSIDE_RUN_DIR),
    ('os.chdir("/")', "os.chdir() is not allowed"),
    ('os.makedirs("/tmp/x")', "os.makedirs() is not allowed"),
    ("import tempfile", "import of tempfile is not allowed"),
    ("import gzip", "import of gzip is not allowed"),
    ("from zipfile import ZipFile", "import from zipfile is not allowed"),
    ("import mmap", "import of mmap is not allowed"),
    ('torch.serialization.save(model.state_dict(), "/tmp/w.pt")', OUTSIDE_RUN_DIR),
    ("torch.serialization.save(model.state_dict(), f=path)", OUTSIDE_RUN_DIR),
    ("objects = gc.get_objects()", ".get_objects may not be used"),
    ("refs = gc.get_referrers(model)", ".get_referrers may not be used"),
    ("sys.settrace(None)", ".settrace may not be used"),
    ('repo = torch.hub.load("x", "y")', ".hub may not be used"),
    ('getattr(torch, "manual_seed")(0)', "getattr(..., 'manual_seed'): the seed belongs to the harness"),
]


@pytest.mark.parametrize(("code", "rule"), EVASIONS, ids=[code.split("\n")[-1][:40] for code, _ in EVASIONS])
def test_an_evasion_of_the_rules_is_rejected(code, rule):
    source, line = appended(code)
    listed = rejection(source).splitlines()[1:]
    assert any(rule in entry and entry.startswith("- line ") for entry in listed), listed


def test_a_seeding_function_imported_under_another_name_changes_the_seeding():
    source, _ = appended("from torch import manual_seed as reset\nreset(0)")
    with pytest.raises(EditRejected, match="changes how train.py is seeded"):
        check_policy(source, parent=TRAIN)


def test_the_policy_walks_the_tree_as_ast_walk_does():
    """The rules that depend on which import binds a name last rely on ast.walk's order, which the checker's own
    faster walk keeps, parents included."""
    tree = ast.parse(TRAIN + "\ndef f():\n    import numpy as np\n    import os as np\n")
    parents: dict = {}
    assert list(_walk(tree, parents)) == list(ast.walk(tree))
    assert parents == {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
