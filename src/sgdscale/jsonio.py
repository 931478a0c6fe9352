"""Versioned JSON documents: read with one-line errors, written whole or not at all (an
interrupted run never leaves half a file)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from sgdscale.errors import UserError

Model = TypeVar("Model", bound=BaseModel)


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
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Write `data` as JSON through `atomic_output`."""
    with atomic_output(path) as tmp, open(tmp, "w") as out:
        json.dump(data, out, indent=1)
        out.write("\n")


def read_document(path: str | os.PathLike[str], schema: str, model: type[Model], *, what: str,
                  missing: str) -> Model:
    """A `schema`-versioned JSON file validated into `model`; every problem one UserError naming
    the file (and the field), `missing` when it does not exist."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(missing) from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"cannot read {what} {path}: {error}") from None
    except json.JSONDecodeError as error:
        raise UserError(f"{path}: not valid JSON (line {error.lineno}: {error.msg})") from None
    if not isinstance(data, dict) or data.get("schema") != schema:
        found = data.get("schema") if isinstance(data, dict) else None
        raise UserError(f"{path}: unsupported schema {found!r}; expected \"{schema}\"")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}"
                             for e in error.errors()[:5])
        raise UserError(f"{path}: invalid {what}: {problems}") from None
