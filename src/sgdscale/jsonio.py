"""Versioned JSON documents: read with one-line errors, written whole or not at all (an
interrupted run never leaves half a file)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from sgdscale.errors import UserError

Model = TypeVar("Model", bound=BaseModel)

# Inside `all_or_nothing`: (temporary, final) paths written and waiting to move into place together.
_staged: ContextVar[list[tuple[Path, Path]] | None] = ContextVar("staged", default=None)


@contextmanager
def all_or_nothing() -> Iterator[None]:
    """Every file written through `atomic_output` inside this block (or a command decorated with
    it) moves into place when the block succeeds; if anything fails, none does, so a run never
    leaves the JSON of a prediction whose plot could not be written."""
    staged: list[tuple[Path, Path]] = []
    token = _staged.set(staged)
    try:
        yield
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    finally:
        _staged.reset(token)
    for tmp, path in staged:
        os.replace(tmp, path)


@contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside `path` to write to; on success it is renamed into place
    with the usual file mode, on any error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    try:
        yield Path(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600
        staged = _staged.get()
        if staged is None:
            os.replace(tmp, path)
        else:
            staged.append((Path(tmp), path))
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Write `data` as JSON through `atomic_output`."""
    try:
        text = json.dumps(data, indent=1, allow_nan=False)  # NaN/Infinity are not JSON: never write them
    except ValueError:
        raise UserError(f"not writing {path}: the result holds a non-finite number (a bug: please report it "
                        "with the command that made it)") from None
    with atomic_output(path) as tmp, open(tmp, "w") as out:
        out.write(text + "\n")


MAX_DEPTH = 64  # the formats nest a few levels; deeper is not one of them (and recursion has limits)


def _depth_ok(data: Any) -> bool:
    """Whether `data` nests at most MAX_DEPTH containers deep (iterative: no recursion limit)."""
    stack = [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                return False
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return True


def parse_json_text(text: str | bytes, source: str, what: str) -> Any:
    """JSON text (UTF-8) as data; every problem one UserError naming `source`. NaN and Infinity,
    which Python writes but JSON does not allow, are read as floats so the field checks name them."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as error:
            raise UserError(f"{source}: not UTF-8 text (byte 0x{text[error.start]:02x} at offset {error.start}), "
                            f"so not a {what}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise UserError(f"{source}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}), "
                        f"so not a {what}") from None
    except RecursionError:
        data = None
    if data is None or not _depth_ok(data):
        raise UserError(f"{source}: nested more than {MAX_DEPTH} levels deep, so not a {what}")
    return data


def read_json_file(path: str | os.PathLike[str], *, what: str, missing: str) -> Any:
    """A JSON file's data; a missing file says `missing`, a directory, unreadable, non-UTF-8 or
    malformed file one line each."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path} is a directory, not a {what}; give the file itself")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(missing) from None
    except OSError as error:
        raise UserError(f"cannot read {what} {path}: {error.strerror or error}") from None
    return parse_json_text(raw, str(path), what)


def read_document(path: str | os.PathLike[str], schema: str, model: type[Model], *, what: str,
                  missing: str, fix: str) -> Model:
    """A `schema`-versioned JSON file validated into `model`; every problem one UserError naming
    the file (and the field, its value and `fix`), `missing` when it does not exist."""
    from sgdscale.inputs import describe

    path = Path(path)
    data = read_json_file(path, what=what, missing=missing)
    if not isinstance(data, dict) or data.get("schema") != schema:
        found = data.get("schema") if isinstance(data, dict) else None
        raise UserError(f"{path}: unsupported schema {found!r}; expected \"{schema}\"")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise UserError(describe(error, f"{path}: invalid {what}", fix)) from None
