"""One checkpoint format for every trainer: safetensors + JSON files, a SHA-256 manifest, a format version.

A run folder holds ``checkpoint-<step>`` folders (periodic saves) and ``checkpoint-last`` (the end of a
:meth:`train` call); :func:`latest_checkpoint` is the one rule by which every trainer finds the one to resume.

A checkpoint may also need *run files*: files that several checkpoints share, kept once in a store folder beside
them (Dreamer's ``replay/`` segments). Its manifest lists them under ``run_files`` (paths relative to the folder
holding the checkpoint, with their SHA-256s), and every check of the checkpoint checks them too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from worldgym.errors import CheckpointError, RunFileError

__all__ = [
    "CRASH_ENV",
    "CRASH_STAGES",
    "FORMAT_VERSION",
    "LAST_CHECKPOINT",
    "MANIFEST",
    "SAVE_STAGES",
    "CheckpointError",
    "atomic_directory",
    "checkpoint_directory",
    "crash_point",
    "fsync_directory",
    "is_complete",
    "latest_checkpoint",
    "load_checkpoint",
    "load_latest",
    "open_checkpoint",
    "optimizer_from_tensors",
    "optimizer_to_tensors",
    "read_json",
    "read_tensors",
    "recover_directory",
    "resolve_checkpoint",
    "run_checkpoints",
    "run_files",
    "save_checkpoint",
    "step_checkpoint",
    "write_durably",
    "write_manifest",
]

MANIFEST = "manifest.json"
# 1: per-trainer layouts, checksums only in GRPO's flat manifest; 2: one manifest with kind, version, SHA-256s
FORMAT_VERSION = 2
# Tests set this to one of CRASH_STAGES to have the saving process SIGKILL itself at that point of a save.
CRASH_ENV = "WORLDGYM_CHECKPOINT_CRASH_AT"
SAVE_STAGES = ("files_written", "synced", "old_moved_aside", "new_renamed_in")  # the stages of one save
# "pruning": a pruned step checkpoint renamed to <name>.deleting, its files not yet removed (worldgym.retention)
CRASH_STAGES = (*SAVE_STAGES, "pruning")
_OLD, _TMP = ".old", ".tmp"
LAST_CHECKPOINT = "checkpoint-last"  # the folder every train() call ends by saving
_RUN_CHECKPOINT = re.compile(r"checkpoint-(\d+|last)")

_WEIGHTS, _OPTIMIZER, _STATE = "weights.safetensors", "optimizer.safetensors", "state.json"
_WEIGHTS_KIND = "weights"
_SHARING_FORMAT_VERSION = 3  # a weights checkpoint that lists run files (older worldgyms would ignore them)


# ---------------------------------------------------------------- optimizer state as tensors + JSON
def optimizer_to_tensors(state_dict: dict[str, Any], prefix: str = "") -> tuple[dict[str, torch.Tensor], dict]:
    """Split ``optimizer.state_dict()`` into tensors (for safetensors) and a JSON-compatible structure.

    Tensor keys are ``"<prefix><param id>.<name>"``; non-tensor per-parameter values, the parameter ids and the
    param groups go into the structure. :func:`optimizer_from_tensors` inverts it.

    >>> p = torch.nn.Parameter(torch.ones(2)); opt = torch.optim.Adam([p]); p.sum().backward(); opt.step()
    >>> tensors, structure = optimizer_to_tensors(opt.state_dict(), prefix="actor.")
    >>> sorted(tensors)
    ['actor.0.exp_avg', 'actor.0.exp_avg_sq', 'actor.0.step']
    >>> opt.load_state_dict(optimizer_from_tensors(tensors, structure, prefix="actor."))
    """
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for param_id, values in state_dict["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{prefix}{param_id}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(param_id), {})[name] = value
    structure = {
        "param_groups": state_dict["param_groups"],
        "param_ids": [str(k) for k in state_dict["state"]],
        "scalars": scalars,
    }
    return tensors, structure


def optimizer_from_tensors(tensors: dict[str, torch.Tensor], structure: dict, prefix: str = "") -> dict[str, Any]:
    """The ``optimizer.state_dict()`` that :func:`optimizer_to_tensors` split (other prefixes are ignored)."""
    state: dict[int, dict[str, Any]] = {
        int(k): dict(structure["scalars"].get(k, {})) for k in structure["param_ids"]
    }
    for key, value in tensors.items():
        if key.startswith(prefix):
            param_id, name = key[len(prefix):].split(".", 1)
            state[int(param_id)][name] = value
    return {"state": state, "param_groups": structure["param_groups"]}


# ---------------------------------------------------------------- atomic, durable directories
@contextmanager
def atomic_directory(final: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling directory to write into; on success it replaces ``final`` durably.

    The new files and folders are fsynced before anything is renamed. An existing ``final`` is renamed aside
    to ``<final>.old``, the new directory renamed in, and only then is ``<final>.old`` removed, so at every
    instant a complete checkpoint exists on disk: a kill -9 anywhere leaves ``final`` or ``<final>.old``
    (which :func:`resolve_checkpoint` finds and the next save restores). An exception while writing leaves
    ``final`` untouched and removes the temporary directory.
    """
    final = Path(final)
    recover_directory(final)
    tmp = _sibling(final, _TMP)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_tree(tmp)
    crash_point("synced")
    _replace_directory(tmp, final)


def recover_directory(final: str | Path) -> None:
    """Finish a replacement a crash cut short: restore ``<final>.old`` if ``final`` is gone, else drop it."""
    final = Path(final)
    old = _sibling(final, _OLD)
    if not old.is_dir():
        return
    if final.exists():
        shutil.rmtree(old)
    else:
        old.rename(final)
        fsync_directory(final.parent)


def resolve_checkpoint(path: str | Path) -> Path:
    """``path``, or ``<path>.old`` when a save was killed after moving the previous checkpoint aside."""
    path = Path(path)
    old = _sibling(path, _OLD)
    return old if not path.exists() and old.is_dir() else path


def _replace_directory(new: Path, final: Path) -> None:
    old = _sibling(final, _OLD)
    if final.exists():
        final.rename(old)
        fsync_directory(final.parent)
        crash_point("old_moved_aside")
    new.rename(final)
    fsync_directory(final.parent)
    crash_point("new_renamed_in")
    shutil.rmtree(old, ignore_errors=True)


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _fsync_tree(root: Path) -> None:
    for directory, _, files in os.walk(root):
        for name in files:
            with open(Path(directory) / name, "rb") as file:
                os.fsync(file.fileno())
        fsync_directory(Path(directory))


def fsync_directory(path: Path) -> None:
    """Make a rename or creation in the directory ``path`` durable (a no-op on Windows)."""
    if os.name != "posix":  # Windows cannot open a directory to fsync it; NTFS journals renames itself
        return
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def crash_point(stage: str) -> None:
    """SIGKILL this process when the environment variable :data:`CRASH_ENV` names ``stage`` (kill tests)."""
    if os.environ.get(CRASH_ENV) == stage:
        os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))


# ---------------------------------------------------------------- manifest: kind, format version, SHA-256s
@contextmanager
def checkpoint_directory(
    final: str | Path,
    kind: str,
    format_version: int,
    step: int | None = None,
    shared: dict[str, str] | None = None,
) -> Iterator[Path]:
    """:func:`atomic_directory` that also writes the manifest of everything written into it, last (with the
    run's progress counter ``step``, by which :func:`latest_checkpoint` orders a run's checkpoints, and the
    run files ``shared`` it needs: path relative to the folder holding ``final`` -> SHA-256, already durable)."""
    with atomic_directory(final) as tmp:
        yield tmp
        crash_point("files_written")
        write_manifest(tmp, kind, format_version, step, shared)


def write_manifest(
    directory: Path, kind: str, format_version: int, step: int | None = None, shared: dict[str, str] | None = None
) -> None:
    """Record ``kind``, ``format_version``, ``step`` (when given), the SHA-256 of every file under ``directory``
    and the run files ``shared`` (when given) in a manifest."""
    files = {name: _sha256(directory / name) for name in _relative_files(directory)}
    manifest: dict[str, Any] = {"kind": kind, "format_version": format_version, "files": files}
    if step is not None:
        manifest["step"] = int(step)
    if shared:
        for name in shared:
            _check_name(directory / MANIFEST, name)
        manifest["run_files"] = dict(sorted(shared.items()))
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


def write_durably(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through ``<path>.tmp``, fsynced, then renamed in (a kill leaves the old
    file or the new one, never a torn one) and the rename made durable."""
    new_folder = not path.parent.is_dir()
    path.parent.mkdir(parents=True, exist_ok=True)
    if new_folder:
        fsync_directory(path.parent.parent)
    tmp = _sibling(path, _TMP)
    with open(tmp, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)


def run_files(folder: str | Path) -> dict[str, str]:
    """The run files (path relative to the folder holding ``folder`` -> SHA-256) the manifest of the checkpoint
    ``folder`` lists; empty when it lists none.

    Raises:
        CheckpointError: the manifest is missing or does not parse.
    """
    manifest = _read_manifest(Path(folder) / MANIFEST)
    shared = manifest.get("run_files", {})
    if not isinstance(shared, dict):
        raise CheckpointError(f"{Path(folder) / MANIFEST} is corrupt: 'run_files' is not a table")
    return shared


def is_complete(folder: str | Path) -> bool:
    """Whether ``folder`` holds a manifest and every file it lists with its SHA-256 (a loadable checkpoint)."""
    try:
        _verify_manifest(Path(folder))
    except CheckpointError:
        return False
    return True


def _verify_manifest(root: Path) -> dict[str, Any]:
    """The manifest of the checkpoint folder ``root`` once every file it lists is there with its SHA-256.

    Raises:
        CheckpointError: naming the file at fault, when the manifest is missing or corrupt, or a listed file
            is missing or differs from its SHA-256 (truncated, edited or bit-flipped).
    """
    if not (root / MANIFEST).is_file():
        raise CheckpointError(f"{root} is not a complete checkpoint: {MANIFEST} is missing")
    manifest = _read_manifest(root / MANIFEST)
    if not isinstance(manifest.get("files"), dict):
        raise CheckpointError(f"{root / MANIFEST} is corrupt: it has no 'files' table")
    _check_files(root, manifest["files"], required=())
    _check_run_files(root, run_files(root))
    return manifest


def open_checkpoint(
    path: str | Path,
    kind: str,
    format_version: int | Sequence[int],
    required: Sequence[str],
    check_run_files: bool = True,
) -> Path:
    """The checked directory of the checkpoint at ``path`` (or the ``<path>.old`` an interrupted save left).

    ``format_version`` is the version this reader reads, or the versions. ``check_run_files=False`` skips the
    run files its manifest lists (for a reader that needs none of them, e.g. a policy export).

    Raises:
        CheckpointError: naming the file at fault, when nothing or only part of a checkpoint is there, the
            manifest is missing, corrupt, of another kind or format version, or a file's SHA-256 differs from
            the manifest (truncated, edited or bit-flipped).
        RunFileError: (a :class:`CheckpointError`) a run file the manifest lists is missing or corrupt.
    """
    root = resolve_checkpoint(path)
    versions = _versions(format_version)
    _check_present(root, kind, versions[0], required)
    manifest = _read_manifest(root / MANIFEST)
    _check_kind_and_version(root / MANIFEST, manifest, kind, versions)
    _check_files(root, manifest["files"], required)
    if check_run_files:
        _check_run_files(root, run_files(root))
    return root


def _versions(format_version: int | Sequence[int]) -> tuple[int, ...]:
    return (format_version,) if isinstance(format_version, int) else tuple(sorted(format_version))


def _check_run_files(root: Path, shared: dict[str, str]) -> None:
    """Every run file in ``shared`` is there, beside ``root``, with its SHA-256."""
    for name, digest in shared.items():
        _check_name(root / MANIFEST, name)
        file = root.parent / name
        if not file.is_file():
            raise RunFileError(
                f"checkpoint {root} needs {file}, which is missing (deleted, or the checkpoint was copied without "
                f"the {PurePosixPath(name).parts[0]}/ folder beside it: copy that folder too)"
            )
        if _sha256(file) != digest:
            raise RunFileError(
                f"run file {file} is corrupt: its SHA-256 differs from the one {root / MANIFEST} records "
                "(truncated, edited or damaged on disk; every checkpoint that needs it is unusable: resume from "
                "one that does not)"
            )


def _check_present(root: Path, kind: str, format_version: int, required: Sequence[str]) -> None:
    names = [*required, MANIFEST]
    present = [name for name in names if (root / name).is_file()]
    if not present:
        raise CheckpointError(
            f"{root} is not a {kind} checkpoint: it holds none of {names} "
            "(wrong folder, or nothing saved yet)"
        )
    missing = [name for name in required if name not in present]
    if missing:
        raise CheckpointError(f"checkpoint {root} is incomplete: missing {missing}")
    if MANIFEST not in present:
        raise CheckpointError(
            f"{root} is not a checkpoint in worldgym's checksummed format: {MANIFEST} is missing "
            f"(an interrupted copy, or a checkpoint saved before format {format_version}, which this "
            "version cannot load: re-create it)"
        )


def _read_manifest(file: Path) -> dict[str, Any]:
    """Parse a manifest (unchecked); one that is not a JSON object raises :class:`CheckpointError`."""
    manifest = read_json(file)
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{file} is corrupt: expected a JSON object, got {type(manifest).__name__}")
    if "format_version" in manifest and not isinstance(manifest.get("files"), dict):
        raise CheckpointError(f"{file} is corrupt: it has no 'files' table")
    return manifest


def _check_kind_and_version(
    file: Path, manifest: dict[str, Any], kind: str, format_versions: tuple[int, ...]
) -> None:
    found = manifest.get("format_version", 1)  # format 1 manifests were a bare {file: sha256} table
    found_kind = manifest.get("kind") if isinstance(manifest.get("files"), dict) else None
    if found_kind is not None and found_kind != kind:  # another kind first: its format number means nothing here
        raise CheckpointError(
            f"{file}: a {found_kind!r} checkpoint, not a {kind!r} one: another kind of checkpoint (format "
            f"{found!r} of {found_kind!r} checkpoints) is here; wrong folder?"
        )
    if found not in format_versions:
        readable = " and ".join(map(str, format_versions))
        raise CheckpointError(
            f"{file}: checkpoint format {found!r}, this worldgym reads format {readable} only "
            "(saved by another worldgym version: load it with that version, or re-create it)"
        )
    if manifest.get("kind") != kind:
        raise CheckpointError(
            f"{file}: a {manifest.get('kind')!r} checkpoint, not a {kind!r} one (wrong folder?)"
        )


def _check_files(root: Path, files: dict[str, str], required: Sequence[str]) -> None:
    unlisted = [name for name in required if name not in files]
    if unlisted:
        raise CheckpointError(f"{root / MANIFEST} is corrupt: it does not list {unlisted}")
    for name, digest in files.items():
        _check_name(root / MANIFEST, name)
        if not (root / name).is_file():
            raise CheckpointError(
                f"checkpoint {root} is incomplete: missing {[name]} (listed in its {MANIFEST})"
            )
        if _sha256(root / name) != digest:
            raise CheckpointError(
                f"checkpoint file {root / name} is corrupt: its SHA-256 differs from {MANIFEST} (truncated, "
                "edited or damaged on disk; resume from an earlier checkpoint)"
            )


def _check_name(manifest: Path, name: str) -> None:
    if not isinstance(name, str) or PurePosixPath(name).is_absolute() or ".." in PurePosixPath(name).parts:
        raise CheckpointError(f"{manifest} is corrupt: file name {name!r} points outside the checkpoint")


def _relative_files(directory: Path) -> list[str]:
    files = (p for p in directory.rglob("*") if p.is_file() and p != directory / MANIFEST)
    return sorted(p.relative_to(directory).as_posix() for p in files)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------- a run's checkpoints
def step_checkpoint(run_dir: str | Path, step: int) -> Path:
    """Where a run saves its periodic checkpoint at ``step``: ``<run_dir>/checkpoint-<step>``."""
    return Path(run_dir) / f"checkpoint-{int(step)}"


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of the run folder ``run_dir``, or None when it holds none.

    The one rule every trainer resumes by:

    * **Candidates** are the folders ``checkpoint-<n>`` and ``checkpoint-last`` directly in ``run_dir``. A
      ``<name>.old`` folder stands in for ``<name>`` when ``<name>`` itself is gone (a save killed after
      moving the previous checkpoint aside); ``<name>.tmp`` folders (a save still writing, or killed before
      its rename) never count.
    * **Newest** is the highest ``step`` recorded in the manifest (the run's progress counter when it was
      saved: GRPO step, Dreamer iteration, PPO rollout), whether numbered or ``checkpoint-last``. A
      numbered checkpoint and ``checkpoint-last`` of the same step hold the same state; the numbered one is
      returned. A checkpoint whose manifest records no step (saved by an older worldgym) counts with the
      number in its name, and ``checkpoint-last`` then as older than every numbered one.
    * **Complete** means the manifest parses and every file it lists is present with its SHA-256. A newer
      candidate that fails the check (half-written, truncated, tampered with) is skipped with a warning
      naming the file at fault, and the next newest is tried.

    Only the returned checkpoint's files are hashed (plus those of any newer damaged one); whether it is of
    the right kind and fits the model is for the trainer's ``load`` to check.
    """
    ranked: list[tuple[tuple[int, bool], Path]] = []
    for folder in run_checkpoints(Path(run_dir)):
        try:
            ranked.append((_rank(folder), folder))
        except CheckpointError as error:
            warnings.warn(f"{error}; trying an older checkpoint", stacklevel=2)
    for _, folder in sorted(ranked, reverse=True):
        try:
            _verify_manifest(folder)
        except CheckpointError as error:
            warnings.warn(f"{error}; trying an older checkpoint", stacklevel=2)
            continue
        return folder
    return None


def load_latest(run_dir: str | Path, load: Callable[[Path], Any]) -> Path | None:
    """Load the newest checkpoint of ``run_dir`` (:func:`latest_checkpoint`) with ``load`` (a trainer's
    ``load``); its path, or None when the folder holds none (a fresh run). Every trainer's ``resume_latest``."""
    path = latest_checkpoint(run_dir)
    if path is not None:
        load(path)
    return path


def run_checkpoints(run_dir: Path) -> list[Path]:
    """The checkpoint folders of a run (``<name>.old`` for a ``<name>`` an interrupted save left aside)."""
    if not run_dir.is_dir():
        return []
    names = {p.name.removesuffix(_OLD) for p in run_dir.iterdir() if p.is_dir()}
    folders = [resolve_checkpoint(run_dir / name) for name in names if _RUN_CHECKPOINT.fullmatch(name)]
    return [folder for folder in folders if folder.is_dir()]


def _rank(folder: Path) -> tuple[int, bool]:
    """``(step, numbered)``: the step recorded in the manifest, else the number in the name (-1 for
    ``checkpoint-last``)."""
    name = folder.name.removesuffix(_OLD)
    numbered = name != LAST_CHECKPOINT
    manifest = _read_manifest(folder / MANIFEST) if (folder / MANIFEST).is_file() else {}
    step = manifest.get("step")
    if step is None:
        return (int(name.rsplit("-", 1)[1]) if numbered else -1), numbered
    if not isinstance(step, int) or isinstance(step, bool):
        raise CheckpointError(f"{folder / MANIFEST} is corrupt: 'step' is {step!r}, not an integer")
    return step, numbered


# ---------------------------------------------------------------- reading files of a checked checkpoint
def read_json(file: Path) -> Any:
    """Parse a checkpoint's JSON file; one that does not parse raises :class:`CheckpointError` naming it."""
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{file} is corrupt: {error}") from None


def read_tensors(file: Path) -> dict[str, torch.Tensor]:
    """Load a checkpoint's safetensors file; a bad one raises :class:`CheckpointError` naming it."""
    try:
        return load_file(str(file))
    except (OSError, SafetensorError) as error:
        raise CheckpointError(f"{file} is corrupt: {error}") from None


# ---------------------------------------------------------------- weights + JSON state (+ optimizer)
def save_checkpoint(
    path: str | Path,
    weights: dict[str, torch.Tensor],
    state: dict[str, Any],
    optimizer: torch.optim.Optimizer | dict[str, Any] | None = None,
    step: int | None = None,
    shared: dict[str, str] | None = None,
) -> Path:
    """Write ``weights`` and the optimizer's tensors (an optimizer, or its ``state_dict()``) as safetensors
    and ``state`` (JSON-able) as JSON; ``step`` (the run's progress counter) and the run files ``shared`` it needs
    (see :func:`checkpoint_directory`; such a checkpoint is of format 3) go into the manifest.

    The files go into a temporary folder with a manifest of their SHA-256s, fsynced, then swapped in for any
    previous checkpoint at ``path`` (see :func:`atomic_directory`), so a kill -9 never leaves no checkpoint.
    """
    path = Path(path)
    version = _SHARING_FORMAT_VERSION if shared else FORMAT_VERSION
    with checkpoint_directory(path, _WEIGHTS_KIND, version, step, shared) as tmp:
        save_file({k: v.detach().contiguous().cpu() for k, v in weights.items()}, str(tmp / _WEIGHTS))
        full_state = {"state": state, "optimizer": None}
        if optimizer is not None:
            state_dict = optimizer if isinstance(optimizer, dict) else optimizer.state_dict()
            tensors, structure = optimizer_to_tensors(state_dict)
            save_file(tensors, str(tmp / _OPTIMIZER))
            full_state["optimizer"] = structure
        (tmp / _STATE).write_text(json.dumps(full_state, indent=1))
    return path


def load_checkpoint(
    path: str | Path, check_run_files: bool = True
) -> tuple[dict[str, torch.Tensor], dict[str, Any], dict[str, Any] | None]:
    """``(weights, state, optimizer_state_dict or None)`` from :func:`save_checkpoint`'s folder
    (``check_run_files=False``: for a reader that needs none of its run files, e.g. a policy export).

    Raises:
        CheckpointError: the folder or a file is missing, a file's hash differs from the manifest (truncated
            or edited), the format version differs, or a file does not parse. The message names the file.
        RunFileError: (a :class:`CheckpointError`) a run file the manifest lists is missing or corrupt.
    """
    root = open_checkpoint(path, _WEIGHTS_KIND, (FORMAT_VERSION, _SHARING_FORMAT_VERSION),
                           required=(_WEIGHTS, _STATE), check_run_files=check_run_files)
    weights = read_tensors(root / _WEIGHTS)
    full_state = read_json(root / _STATE)
    optimizer = None
    if full_state.get("optimizer") is not None:
        optimizer = optimizer_from_tensors(read_tensors(root / _OPTIMIZER), full_state["optimizer"])
    return weights, full_state["state"], optimizer
