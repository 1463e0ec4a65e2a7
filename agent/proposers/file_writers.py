"""What in train.py writes a file, and where: the writers the sandbox policy (agent/proposers/policy.py)
knows, by name, by module and by method, with where each takes the path it writes, and the helpers that read
those paths and modes off a call's syntax tree."""

from __future__ import annotations

import ast
from typing import NamedTuple

WRITE_MODES = set("wax+")
READ_ONLY_MAPS = {"readonly", "copyonwrite"}  # numpy.memmap's long mode names, letters of WRITE_MODES in them
PATH_WRITERS = {"write_text", "write_bytes", "mkdir", "touch", "unlink", "rmdir", "rename", "replace",
                "symlink_to", "hardlink_to", "chmod"}
# Of those, the ones no other common type has: on anything but Path("literal") they are refused, since the
# path a variable holds cannot be checked here.
PATH_ONLY_WRITERS = PATH_WRITERS - {"rename", "replace"}
# Keywords that name a file to write in the writers below; any of them in a writer's call is checked as a path.
PATH_KEYWORDS = {"f", "fp", "fid", "file", "fname", "filename", "file_name", "path", "path_or_buf", "path_or_buffer",
                 "buf", "excel_writer", "workbook", "target", "where", "sink", "source", "base_dir", "src", "dest",
                 "destination", "output_file", "uri", "log_dir", "dir_name", "folder", "checkpoint_id"}


class Writer(NamedTuple):
    """How a call writes files. positions: of the arguments that name them (a PATH_KEYWORDS keyword names one too);
    optional: without any it writes nothing (it returns the text) or only a default file in the run directory;
    mode: (position, keyword, default) of the argument that decides whether it writes at all (a mode, shared=)."""
    positions: tuple[int, ...]
    optional: bool = False
    mode: tuple[int, str, object] | None = None


def _writers(names: str, *positions: int, optional: bool = False,
             mode: tuple[int, str, object] | None = None) -> dict[str, Writer]:
    return dict.fromkeys(names.split(), Writer(positions, optional, mode))


# Writers known by their name on whatever they are called: methods of objects whose type is not visible here
# (a data frame, a figure, a file system) and functions of the modules above, should they be reached anyway.
WRITER_ATTRIBUTES = {
    **_writers("OSFile memory_map", 0, mode=(1, "mode", "r")),  # pyarrow
    **_writers("memmap", 0, mode=(2, "mode", "r+")),  # numpy
    **_writers("open_memmap", 0, mode=(1, "mode", "r+")),  # numpy.lib.format
    **_writers("from_file", 0, mode=(1, "shared", None)),  # torch, torch.UntypedStorage
    **_writers("create_memory_map output_stream new_file new_stream RecordBatchFileWriter RecordBatchStreamWriter "
               "ParquetWriter open_output_stream open_append_stream create_dir delete_dir delete_dir_contents "
               "delete_file", 0),  # pyarrow, pyarrow.ipc, pyarrow.parquet, pyarrow.fs
    **_writers("write_table write_dataset write_feather copy_file", 1),  # pyarrow
    **_writers("move", 0, 1),  # pyarrow.fs: both the file moved away and the one written
    **_writers("to_feather to_pickle to_hdf to_excel to_stata write_parquet write_ipc write_ipc_stream write_avro "
               "write_delta sink_parquet sink_csv sink_ipc sink_ndjson", 0),  # pandas, polars
    **_writers("to_parquet to_csv to_json to_orc to_xml to_html to_latex to_markdown write_json write_ndjson "
               "write_excel", 0, optional=True),  # pandas, polars: without a path they return the text
    **_writers("write_csv", 0, 1, optional=True),  # polars (file), pyarrow.csv (data, output_file)
    **_writers("tofile", 0),  # numpy
    **_writers("export_chrome_trace export_stacks export_memory_timeline tensorboard_trace_handler to_folder "
               "dump_stats", 0),  # torch.profiler, torch.fx, cProfile
    **_writers("SummaryWriter _dump_snapshot", 0, optional=True),  # torch: default files in the run directory
    **_writers("save_file save_model save_image write_png write_jpeg", 1),  # safetensors, torchvision
    **_writers("write_video write_file savefig imsave savemat mmwrite", 0),  # torchvision, matplotlib, scipy
    **_writers("save_pretrained", 0),  # transformers, diffusers
    **_writers("FileHandler RotatingFileHandler TimedRotatingFileHandler WatchedFileHandler", 0),  # logging
    **_writers("File", 0, mode=(1, "mode", "r")),  # h5py
    **_writers("basicConfig", optional=True),  # logging: filename=
}
# Names that modules also give functions which write nothing themselves (json.dump into an opened file,
# safetensors.torch.save): writers only as methods (a scripted module's or an image's save, ndarray.dump).
METHOD_WRITERS = _writers("save dump", 0)
# Functions of modules train.py may import that write files under a name too common for the set above.
MODULE_WRITERS = {
    "numpy.load": Writer((0,), mode=(1, "mmap_mode", None)),
    "torch.onnx.export": Writer((2,), optional=True),
    "torchaudio.save": Writer((0,)),
}
WRITER_NAMES = {*WRITER_ATTRIBUTES, *METHOD_WRITERS, *(name.rsplit(".", 1)[-1] for name in MODULE_WRITERS)}
TORCH_SAVE = Writer((1,))  # torch.save, torch.jit.save, torch.export.save, torch.serialization.save, ...
NUMPY_SAVE = Writer((0,))  # numpy.save, numpy.savez, numpy.savez_compressed, numpy.savetxt

def module_writer(qualified: str) -> Writer | None:
    name = qualified.rsplit(".", 1)[-1]
    if qualified in MODULE_WRITERS:
        return MODULE_WRITERS[qualified]
    if qualified.startswith("torch.") and name == "save":
        return TORCH_SAVE
    if qualified.startswith("numpy.") and name.startswith("save"):
        return NUMPY_SAVE
    return WRITER_ATTRIBUTES.get(name)


def shortened(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def path_method_write(node: ast.Call) -> ast.AST | None | bool:
    """For a pathlib-style write (Path("x").write_text(...), p.touch()), the path it writes (None: held elsewhere,
    so not checkable); False when the call is none."""
    func = node.func
    if not isinstance(func, ast.Attribute):
        return False
    receiver = func.value
    if not (isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "Path"):
        if func.attr in PATH_ONLY_WRITERS or func.attr == "open" and opens_for_writing(node, 0):
            return None
        return False
    if func.attr in PATH_WRITERS or func.attr == "open" and opens_for_writing(node, 0):
        return receiver.args[0] if receiver.args else None
    return False


def argument(node: ast.Call, position: int, keyword: str | None = None) -> ast.AST | None:
    """What the call passes at position or as keyword; a *args or **kwargs that may hold it stands for it (and,
    being no literal, counts as unknown). None when it is not passed."""
    for argument in node.args[:position + 1]:
        if isinstance(argument, ast.Starred):
            return argument
    if position < len(node.args):
        return node.args[position]
    return next((k.value for k in node.keywords if k.arg is None or k.arg == keyword), None)


def opens_for_writing(node: ast.Call, position: int, keyword: str = "mode", default: object = None) -> bool:
    """Whether the mode (or shared=) argument asks to write; an argument that is not a literal counts as writing."""
    mode = argument(node, position, keyword)
    if mode is not None and not isinstance(mode, ast.Constant):
        return True
    if (value := default if mode is None else mode.value) is None or isinstance(value, bool):
        return bool(value)
    return str(value) not in READ_ONLY_MAPS and bool(WRITE_MODES & set(str(value)))


def inside_run_dir(path: str) -> bool:
    return not path.startswith(("/", "~")) and ".." not in path.replace("\\", "/").split("/")
