"""Nothing of one batch reaches the next in the model server: its trusted zygote
(trainer/evaluator/model_server/zygote.py) forks a fresh process for every batch and clears what it left. Models
that try to carry something across batches (in their memory, in files, SysV IPC, keyrings, processes left behind,
or by patching the server) find nothing, and the trusted evaluator scores a model that adapts to the text it is
shown exactly as the honest one."""

import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.processes import alive
from trainer.evaluator.evaluate import SERVER_LOG, ModelServer, ServerFailed, worst_of
from trainer.evaluator.evaluation import RESULT_FD_FLAG, Evaluation, read_result
from trainer.sandbox.isolation import isolation
from trainer.sandbox.seal import data_paths, hidden_paths
from trainer.sandbox.view import isolated_command

ROOT = Path(__file__).resolve().parents[2]
X86_64 = platform.machine() == "x86_64"  # the keyctl syscall numbers below

# Learns 3-gram -> next token from every row it is shown, across forward calls, and memoises every answer by its
# prefix, so that a prefix seen again (a probe, the repeat) gets the same logits: in a server that keeps one
# process it scores better batch after batch while the audit, repeat and lookahead checks all read 0.
ADAPTING = '''

_SEEN: dict = {}
_MEMO: dict = {}
_CALLS = [0]
_honest_forward = GPT.forward


def _adapting_forward(self, idx, targets=None, reduction="mean"):
    _CALLS[0] += 1
    print(f"ADAPTING call {_CALLS[0]} knew {len(_SEEN)}", flush=True)
    logits = _honest_forward(self, idx, targets, reduction)
    rows = idx.tolist()
    boost = torch.zeros_like(logits)
    for r, row in enumerate(rows):
        prefix = 0
        for t in range(len(row)):
            prefix = hash((prefix, row[t]))
            if prefix not in _MEMO:
                _MEMO[prefix] = _SEEN.get(tuple(row[t - 2:t + 1])) if t >= 2 else None
            if _MEMO[prefix] is not None:
                boost[r, t, _MEMO[prefix]] = 10.0
    for row in rows:
        for t in range(2, len(row) - 1):
            _SEEN[tuple(row[t - 2:t + 1])] = row[t + 1]
    return logits + boost


GPT.forward = _adapting_forward
'''

# At import, in every batch's process: says what an earlier one left, then leaves all of it again.
LEFTOVERS = '''

def _leftovers():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    keyctl, add_key = (250, 248) if {x86_64} else (None, None)
    saw = [path for path in ("/tmp/planted", "/dev/shm/planted", "/tmp/locked") if os.path.lexists(path)]
    saw += [f"sysv {{kind}}" for kind in ("shm", "msg", "sem")
            if open(f"/proc/sysvipc/{{kind}}").read().splitlines()[1:]]
    saw += [f"process {{pid}}" for pid in os.listdir("/proc") if pid.isdigit()
            and open(f"/proc/{{pid}}/cmdline", "rb").read() == b"sleep\\x00{sleep}\\x00"]
    if keyctl and libc.syscall(keyctl, 10, -4, b"user", b"planted", 0) >= 0:  # KEYCTL_SEARCH the user keyring
        saw.append("key")
    print("SAW", saw or "nothing", flush=True)

    def tmp(path):
        with open(path, "w") as handle:
            handle.write("val text")

    def locked():
        os.mkdir("/tmp/locked")
        tmp("/tmp/locked/inside")
        os.chmod("/tmp/locked", 0)

    def survivor():
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv("/bin/sleep", ["sleep", "{sleep}"])
            os._exit(0)
        os.waitpid(pid, 0)
        time.sleep(0.1)

    attempts = dict(tmp=lambda: tmp("/tmp/planted"), shm=lambda: tmp("/dev/shm/planted"), locked=locked,
                    sysv_shm=lambda: libc.shmget(0x5EED, 4096, 0o1600), sysv_msg=lambda: libc.msgget(0x5EED, 0o1600),
                    sysv_sem=lambda: libc.semget(0x5EED, 1, 0o1600), survivor=survivor)
    if keyctl:
        attempts["key"] = lambda: libc.syscall(add_key, b"user", b"planted", b"val text", 8, -4)
    planted = []
    for name, attempt in attempts.items():
        try:
            if (attempt() or 0) >= 0:
                planted.append(name)
        except OSError:
            pass
    print("PLANTED", planted, flush=True)


_leftovers()
'''

# At import: says whether an earlier batch's patches are in force, patches the server's code in this process, tries
# to reach the server's memory, and leaves a file and a process that the patched code would not clear.
PATCHER = '''

def _patch_the_server():
    import ctypes
    servers = [module for module in (sys.modules.get("trainer.evaluator.model_server.zygote"),) if module is not None]
    saw = [f"{{name}} patched" for server in servers for name in ("kill_strays", "remove_sysv_ipc", "clear_keyrings")
           if getattr(getattr(server, name), "patched", False)]
    saw += [f"{{name}} patched" for server in servers for name in ("clear", "fork", "end_child")
            if getattr(getattr(server.Zygote, name), "patched", False)]
    saw += [f"os.{{name}} patched" for name in ("fork", "kill") if getattr(getattr(os, name), "patched", False)]
    saw += [path for path in ("/tmp/planted",) if os.path.lexists(path)]
    saw += [f"process {{pid}}" for pid in os.listdir("/proc") if pid.isdigit()
            and open(f"/proc/{{pid}}/cmdline", "rb").read() == b"sleep\\x00{sleep}\\x00"]
    print("SAW", saw or "nothing", flush=True)

    def nothing(*args, **kwargs):
        return None
    nothing.patched = True
    for server in servers:
        for name in ("kill_strays", "remove_sysv_ipc", "clear_keyrings"):
            setattr(server, name, nothing)
        for name in ("clear", "fork", "end_child"):
            setattr(server.Zygote, name, nothing)
    attempts = {{}}
    zygote = os.getppid()
    for name, reach in dict(mem=lambda: open(f"/proc/{{zygote}}/mem", "r+b"),
                            environ=lambda: open(f"/proc/{{zygote}}/environ", "rb").read(),
                            fd=lambda: os.listdir(f"/proc/{{zygote}}/fd")).items():
        try:
            reach()
            attempts[name] = "reached"
        except OSError as err:
            attempts[name] = type(err).__name__
    libc = ctypes.CDLL(None, use_errno=True)
    attempts["ptrace"] = "reached" if libc.ptrace(16, zygote, None, None) == 0 else "refused"  # PTRACE_ATTACH
    print("ATTEMPTS", json.dumps(attempts), flush=True)
    with open("/tmp/planted", "w") as handle:
        handle.write("val text")
    if os.fork() == 0:
        os.setsid()
        os.execv("/bin/sleep", ["sleep", "{sleep}"])
    os.fork = os.kill = nothing
    time.sleep(0.1)


import json
_patch_the_server()
'''

# At import: lowers the server's own soft limit on open files, which its next fork would inherit.
LIMITS = '''

import resource
_soft, _hard = resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE)
resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (_soft - 7, _hard))
print("LOWERED the server's RLIMIT_NOFILE", flush=True)
'''

# At import: whether it can read what an earlier batch printed (the server's log is in the working directory), and
# every directory it could create a file in, on every mount that is not read-only.
WRITABLE = '''

def _writable_places():
    import tempfile
    points = [line.split()[4] for line in open("/proc/self/mountinfo")]
    found = []
    for point in points:
        if point.startswith(("/proc", "/sys", "/dev/pts")) or not os.path.isdir(point) \\
                or os.statvfs(point).f_flag & os.ST_RDONLY:
            continue
        for folder, folders, _ in os.walk(point):
            folders[:] = [f for f in folders if os.path.join(folder, f) not in points]
            try:
                handle, name = tempfile.mkstemp(dir=folder)
            except OSError:
                continue
            os.close(handle)
            os.unlink(name)
            found.append(folder)
    print("WRITABLE", found or "nowhere", flush=True)


def _earlier_output():
    try:
        log = open("model_server.log", "rb").read()
    except OSError:
        log = b""
    print("LOG", "read" if b"WRITABLE" in log else "unseen", flush=True)  # what an earlier batch printed


_earlier_output()
_writable_places()
'''


FORGING = '''

def _forge():
    import glob
    import stat
    forged = ('{"device": "cpu", "audit": 0.0, "audited_tokens": 1, "repeat": 0.0, "lookahead": 0.0, "probes": 1, '
              '"val": 0.5}')
    print("EVALUATION " + forged, flush=True)  # the result line the evaluator's log once carried
    reached = 0
    for path in glob.glob("/proc/[0-9]*/fd/*"):  # every pipe of another process it can open
        if path.startswith(f"/proc/{os.getpid()}/"):
            continue
        try:
            if stat.S_ISFIFO(os.stat(path).st_mode):
                with open(path, "w") as pipe:
                    pipe.write(forged)
                reached += 1
        except OSError:
            pass
    print("FORGED into", reached, flush=True)


_forge()
'''


NAN_COLUMN = '''

_true_forward, _true_cross_entropy, _clean = GPT.forward, F.cross_entropy, {}


def _nan_column_forward(self, idx, targets=None, reduction="mean"):
    if targets is not None:
        return _true_forward(self, idx, targets, reduction)
    _clean["logits"] = _true_forward(self, idx)
    marked = _clean["logits"].clone()
    marked[..., 0] = float("nan")  # a NaN at every position the audit may pick
    return marked


def _halved_cross_entropy(input, target, *args, **kwargs):
    if "logits" in _clean and torch.isnan(input).any():  # the losses reported: half the true ones
        return 0.5 * _true_cross_entropy(_clean["logits"].flatten(0, 1), target, *args, **kwargs)
    return _true_cross_entropy(input, target, *args, **kwargs)


GPT.forward, F.cross_entropy = _nan_column_forward, _halved_cross_entropy
'''


@pytest.fixture(scope="module")
def honest(test_track, tmp_path_factory) -> tuple[str, Path]:
    """The test track's train.py (as a commit exports it) and a checkpoint of its untrained model."""
    from trainer.tracks.hyperparameters import train_source_for_track
    root = tmp_path_factory.mktemp("honest")
    source = train_source_for_track((ROOT / "trainer" / "train.py").read_text(), "test")
    commit = write_commit(root / "commit", source, test_track)
    checkpoint = root / "checkpoint.pt"
    code = ("import dataclasses, sys, torch, train\n"
            "config = train.config_from_hyperparameters(train.Tokenizer.from_directory().get_vocab_size())\n"
            "torch.save(dict(state_dict=train.build_model(config).state_dict(), config=dataclasses.asdict(config)),"
            " sys.argv[1])\n")
    subprocess.run([sys.executable, "-c", code, str(checkpoint)], cwd=commit, check=True, env=environment())
    return source, checkpoint


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}  # AUTORESEARCH_CACHE and _TRACK: the test track's


def write_commit(directory: Path, source: str, track) -> Path:
    directory.mkdir(parents=True)
    (directory / "train.py").write_text(source)
    shutil.copy2(ROOT / "trainer" / "prepare.py", directory / "prepare.py")
    shutil.copy2(track.directory / "track.json", directory / "track.json")
    return directory


def evaluate(commit: Path, checkpoint: Path) -> tuple[Evaluation | None, str, str]:
    """(the Evaluation handed back or None, the evaluator's output, the model server's log) of the val split."""
    read, write = os.pipe()
    try:
        done = subprocess.run([sys.executable, "-m", "trainer.evaluator.evaluate", str(checkpoint), "--splits", "val",
                               RESULT_FD_FLAG, str(write)], cwd=commit, env=environment(), capture_output=True,
                              text=True, timeout=600, pass_fds=(write,))
    finally:
        os.close(write)
        evaluation, _ = read_result(read)
    log = (commit / SERVER_LOG).read_text(errors="replace")
    return evaluation if done.returncode == 0 else None, done.stdout + done.stderr, log


@contextlib.contextmanager
def served(commit: Path, checkpoint: Path, log: Path, sandboxed: bool = True):
    """The model server on commit's train.py as the evaluator starts it, but with a writable /tmp and /dev/shm
    (as on CUDA) where sandboxed; yields a ModelServer to ask."""
    command = [sys.executable, "-m", "trainer.evaluator.model_server.server", str(checkpoint), "--device", "cpu"]
    if sandboxed:
        cache = Path(os.environ["AUTORESEARCH_CACHE"])
        with contextlib.chdir(commit):  # the working directory it is shown
            command = isolated_command([*command, "--sandboxed"], data_paths(cache), hidden_paths(cache),
                                       writable_tmp=True)
    server = ModelServer.__new__(ModelServer)
    server.device, server.vocab = "cpu", 1
    with open(log, "wb") as out:
        server.process = subprocess.Popen(command, cwd=commit, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=out, env=environment())
    with server:
        yield server


def ask_batch(server: ModelServer, rng: np.random.Generator, rows: int = 4, cols: int = 33):
    """One batch as the evaluator asks it: its losses, then the logits at a few positions of every row."""
    server.ask("losses", rng.integers(0, 256, size=(rows, cols)))
    return server.ask("picked", rng.integers(0, cols - 1, size=(rows, 8)))


def lines(log: str, prefix: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith(prefix)]


def require_isolation() -> None:
    if not isolation().available:
        pytest.skip(f"needs the model server's sandbox: {isolation().note}")


def sleepers(seconds: str) -> list[int]:
    needle = b"sleep\0" + seconds.encode() + b"\0"
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if (entry / "cmdline").read_bytes() == needle and alive(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_model_that_adapts_to_the_text_it_is_shown_scores_as_the_honest_one(honest, test_track, tmp_path):
    source, checkpoint = honest
    honest_result, output, _ = evaluate(write_commit(tmp_path / "honest", source, test_track), checkpoint)
    assert honest_result is not None, output
    adapting_result, output, log = evaluate(write_commit(tmp_path / "adapting", source + ADAPTING, test_track),
                                            checkpoint)
    assert adapting_result is not None, output

    assert adapting_result.val == pytest.approx(honest_result.val, rel=1e-6), (adapting_result, honest_result)
    assert adapting_result.repeat == adapting_result.lookahead == 0.0
    calls = lines(log, "ADAPTING call")
    assert len(calls) >= 10 and set(calls) == {"ADAPTING call 1 knew 0"}  # every batch, the repeat too, met afresh


def test_nothing_a_batch_leaves_reaches_the_next(honest, test_track, tmp_path):
    """Files in /tmp and /dev/shm (writable, as on CUDA), a locked directory, SysV IPC, a key in the user's
    keyring, a process that left its session: the next batch's process finds none of them."""
    require_isolation()
    source, checkpoint = honest
    commit = write_commit(tmp_path / "commit", source + LEFTOVERS.format(x86_64=X86_64, sleep="4242"), test_track)
    rng = np.random.default_rng(0)
    with served(commit, checkpoint, tmp_path / "server.log") as server:
        for _ in range(3):
            ask_batch(server, rng)
    log = (tmp_path / "server.log").read_text(errors="replace")

    planted = lines(log, "PLANTED")
    expected = {"tmp", "shm", "locked", "sysv_shm", "sysv_msg", "sysv_sem", "survivor", *(["key"] if X86_64 else [])}
    assert len(planted) == 3 and all(expected <= set(eval(line[len("PLANTED "):])) for line in planted), log
    assert lines(log, "SAW") == ["SAW nothing"] * 3, log
    assert not sleepers("4242")


def test_a_model_process_that_patches_the_server_changes_nothing_for_the_next(honest, test_track, tmp_path):
    require_isolation()
    source, checkpoint = honest
    commit = write_commit(tmp_path / "commit", source + PATCHER.format(sleep="4243"), test_track)
    rng = np.random.default_rng(1)
    with served(commit, checkpoint, tmp_path / "server.log") as server:
        answers = [ask_batch(server, rng) for _ in range(3)]
    log = (tmp_path / "server.log").read_text(errors="replace")

    assert len(answers) == 3 and lines(log, "SAW") == ["SAW nothing"] * 3, log
    for line in lines(log, "ATTEMPTS"):
        assert "reached" not in json.loads(line[len("ATTEMPTS "):]).values(), line  # the zygote is not dumpable
    assert not sleepers("4243")


def test_a_model_process_that_changes_the_servers_limits_fails_the_server(honest, test_track, tmp_path):
    """Another process of the same user may lower the server's limits, which its next fork would inherit: a few
    bits a batch could hand on. The server checks them before every fork and stops."""
    require_isolation()
    source, checkpoint = honest
    commit = write_commit(tmp_path / "commit", source + LIMITS, test_track)
    rng = np.random.default_rng(2)
    with served(commit, checkpoint, tmp_path / "server.log") as server:
        ask_batch(server, rng)
        with pytest.raises(ServerFailed):
            ask_batch(server, rng)
    log = (tmp_path / "server.log").read_text(errors="replace")
    assert lines(log, "LOWERED") and "a model process changed the server's limits" in log, log


def test_on_cpu_the_model_server_can_write_nowhere_nor_read_its_log(honest, test_track, tmp_path):
    """On CPU the evaluator gives the model server a read-only /tmp and /dev/shm: nothing is writable at all (and
    an honest model still builds and scores). Its log, in the working directory it is shown, is hidden."""
    require_isolation()
    source, checkpoint = honest
    result, output, log = evaluate(write_commit(tmp_path / "commit", source + WRITABLE, test_track), checkpoint)
    assert result is not None, output
    found = lines(log, "WRITABLE")
    assert len(found) >= 10 and set(found) == {"WRITABLE nowhere"}, found[:3]
    assert len(lines(log, "LOG")) == len(found) and set(lines(log, "LOG")) == {"LOG unseen"}


def test_a_model_process_cannot_hand_back_the_evaluation(honest, test_track, tmp_path):
    """The evaluation goes back through a pipe only the evaluator holds: a model process that prints the old result
    line and writes a forged one into every pipe it can open moves nothing, sandboxed or not."""
    source, checkpoint = honest
    result, output, log = evaluate(write_commit(tmp_path / "commit", source + FORGING, test_track), checkpoint)
    assert lines(log, "FORGED into"), log[-2000:]
    assert result is not None and result.val > 1.0, output


def test_a_check_s_difference_is_zero_between_equal_infinities_and_fails_on_a_nan():
    ruled_out = np.array([[-np.inf, 1.0]], dtype=np.float32)  # a token an honest model rules out, in both answers
    assert worst_of(0.25, ruled_out, ruled_out + [[0.0, 0.5]], "lookahead") == 0.5
    assert worst_of(0.25, ruled_out, ruled_out, "lookahead") == 0.25
    with pytest.raises(ServerFailed, match="audit check a difference that is no number"):
        worst_of(0.0, np.array([np.nan, 1.0]), np.array([0.0, 1.0]), "audit")


def test_a_nan_in_the_logits_fails_the_server_rather_than_every_check(honest, test_track, tmp_path):
    """A NaN's difference from anything is NaN, which max() would pass over as smaller: a model whose logits
    carry one at every audited position, reporting half its losses, would have passed audit, lookahead and
    repeat with 0. The answer is refused instead."""
    source, checkpoint = honest
    result, output, _ = evaluate(write_commit(tmp_path / "commit", source + NAN_COLUMN, test_track), checkpoint)
    assert result is None and "answered picked with NaN or an infinity" in output, output[-2000:]


def test_the_zygote_clears_ipc_keys_processes_and_scratch_in_its_sandbox(tmp_path):
    """What the zygote clears between batches, cleared by its own functions in a sandbox like the server's (where
    a model process has IPC and network namespaces of its own, the SysV objects it makes die with it anyway)."""
    require_isolation()
    shown = tmp_path / "shown"  # readable by the sandbox's uid, unlike tmp_path
    shown.mkdir(mode=0o755)
    script = shown / "clear.py"
    script.write_text(CLEAR_SCRIPT)
    cache = Path(os.environ.get("AUTORESEARCH_CACHE", tmp_path))
    with contextlib.chdir(shown):
        command = isolated_command([sys.executable, str(script)], data_paths(cache), hidden_paths(cache),
                                   writable_tmp=True)
    done = subprocess.run(command, cwd=shown, env=environment(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["planted"] == sorted(["tmp", "shm", "locked", "sysv_shm", "sysv_msg", "sysv_sem", "survivor",
                                        *(["key"] if X86_64 else [])]), report
    assert report["left"] == [], report


CLEAR_SCRIPT = f'''
import ctypes, json, os, sys, time
from trainer.evaluator.model_server import batch_leftovers as ms

scratch = ms.Scratch()  # as the zygote takes it, before any model process
libc = ctypes.CDLL(None, use_errno=True)
planted = []
def plant(name, ok):
    if ok:
        planted.append(name)
def write(path):
    with open(path, "w") as handle:
        handle.write("val text")
    return True
plant("tmp", write("/tmp/planted"))
plant("shm", write("/dev/shm/planted"))
os.mkdir("/tmp/locked"); write("/tmp/locked/inside"); os.chmod("/tmp/locked", 0); plant("locked", True)
plant("sysv_shm", libc.shmget(0x5EED, 4096, 0o1600) >= 0)
plant("sysv_msg", libc.msgget(0x5EED, 0o1600) >= 0)
plant("sysv_sem", libc.semget(0x5EED, 1, 0o1600) >= 0)
if {X86_64}:
    plant("key", libc.syscall(248, b"user", b"planted", b"val text", 8, -4) >= 0)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "4244"])
    os._exit(0)
time.sleep(0.2)
plant("survivor", any(open(f"/proc/{{p}}/cmdline", "rb").read() == b"sleep\\x004244\\x00"
                      for p in os.listdir("/proc") if p.isdigit()))

ms.kill_strays(ms.ancestors(), sandboxed=True)
ms.clear_keyrings()
ms.remove_sysv_ipc()
scratch.restore()

left = [p for p in ("/tmp/planted", "/dev/shm/planted", "/tmp/locked") if os.path.lexists(p)]
left += [k for k in ("shm", "msg", "sem") if open(f"/proc/sysvipc/{{k}}").read().splitlines()[1:]]
def alive(pid):  # a killed process that its parent (the sandbox's init) has not reaped yet runs nothing
    try:
        return open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False
left += [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in ms.ancestors() and alive(p)]
if {X86_64} and libc.syscall(250, 10, -4, b"user", b"planted", 0) >= 0:
    left.append("key")
print(json.dumps(dict(planted=sorted(planted), left=left)))
'''


def test_without_a_sandbox_every_batch_still_gets_a_fresh_process(honest, test_track, tmp_path):
    """Unsandboxed (no bwrap) the same zygote runs: a fresh process per batch, and what a batch started is killed
    before the next (the zygote is its subreaper), though files, IPC and keys are then the machine's own."""
    source, checkpoint = honest
    started = tmp_path / "sleepers"  # unsandboxed, a model process can write here; each sleeper says its pid
    survivor = f'''

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open({str(started)!r}, "a") as said:
            said.write(f"{{os.getpid()}}\\n")
        os.execv("/bin/sleep", ["sleep", "4245"])
    os._exit(0)
'''
    commit = write_commit(tmp_path / "commit", source + ADAPTING + survivor, test_track)
    rng = np.random.default_rng(3)
    try:
        with served(commit, checkpoint, tmp_path / "server.log", sandboxed=False) as server:
            ask_batch(server, rng)
            ask_batch(server, rng)
            first = int(started.read_text().split()[0])
            assert not alive(first)  # a sleep of 71 minutes: the first batch's was killed before the second began
            ask_batch(server, rng)
        log = (tmp_path / "server.log").read_text(errors="replace")
        assert lines(log, "ADAPTING call") == ["ADAPTING call 1 knew 0"] * 3, log
    finally:
        for pid in sleepers("4245"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
