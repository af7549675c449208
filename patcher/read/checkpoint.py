"""Read stage: a checkpoint folder's `config.json` and its weights' names, shapes and dtypes.

Only headers are read, never tensor data: a `.safetensors` file starts with an 8-byte little-endian
length and that many bytes of JSON (`{"name": {"dtype", "shape", "data_offsets"}, "__metadata__"}`),
and a sharded checkpoint's `model.safetensors.index.json` names the file of every weight.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EaglepatchError

MAX_HEADER = 100 * 1024 * 1024  # what the safetensors format allows a header


@dataclass(frozen=True)
class Weight:
    name: str
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Checkpoint:
    path: Path  # the folder
    config: Mapping[str, object]
    weights: Mapping[str, Weight] = field(default_factory=dict)  # {} when the folder holds no safetensors
    weight_files: tuple[str, ...] = ()

    @property
    def text_config(self) -> Mapping[str, object]:
        """The language model's config: `text_config` of a multimodal one (as SGLang's
        `get_hf_text_config` takes it), else the config itself."""
        text = self.config.get("text_config")
        return text if isinstance(text, dict) else self.config

    @property
    def architectures(self) -> tuple[str, ...]:
        found = self.config.get("architectures")
        return tuple(a for a in found if isinstance(a, str)) if isinstance(found, list) else ()

    def number(self, key: str, text: bool = True) -> int | None:
        value = (self.text_config if text else self.config).get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_header(path: Path) -> dict[str, Weight]:
    """The tensors a .safetensors file declares."""
    try:
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) != 8:
                raise EaglepatchError("is not a safetensors file (shorter than its 8-byte header length)", path=str(path))
            (size,) = struct.unpack("<Q", prefix)
            if size > MAX_HEADER:
                raise EaglepatchError(f"is not a safetensors file (header of {size} bytes)", path=str(path))
            header = json.loads(handle.read(size).decode("utf-8"))
    except OSError as exc:
        raise EaglepatchError(f"cannot be read ({exc.strerror or exc})", path=str(path)) from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise EaglepatchError("is not a safetensors file (its header is not JSON)", path=str(path)) from None
    if not isinstance(header, dict):
        raise EaglepatchError("is not a safetensors file (its header is not a JSON object)", path=str(path))
    out = {}
    for name, entry in header.items():
        if name == "__metadata__" or not isinstance(entry, dict):
            continue
        shape = entry.get("shape")
        out[name] = Weight(name, str(entry.get("dtype", "")), tuple(int(d) for d in shape) if isinstance(shape, list) else ())
    return out


def read_checkpoint(folder: Path, what: str) -> Checkpoint:
    """`what` names it in errors ("the target", "the draft")."""
    folder = Path(folder)
    config_path = folder / "config.json" if folder.is_dir() else folder
    if not config_path.is_file():
        raise EaglepatchError(f"{what} is not a checkpoint folder (no config.json); pass a local folder", path=str(folder))
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EaglepatchError(f"{what}'s config.json is not readable JSON ({exc})", path=str(config_path)) from None
    if not isinstance(config, dict):
        raise EaglepatchError(f"{what}'s config.json is not a JSON object", path=str(config_path))
    base = config_path.parent
    files = sorted(p.name for p in base.glob("*.safetensors"))
    weights: dict[str, Weight] = {}
    for name in files:
        weights.update(read_header(base / name))
    return Checkpoint(base, config, weights, tuple(files))


def local_checkpoint(value: str | None, what: str) -> Checkpoint | None:
    """The checkpoint a launch names by `value` (None when it names none); a name that is no local
    folder stops preflight, which reads config.json and never downloads."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.exists():
        raise EaglepatchError(f"{what} {value!r} is not a local folder: preflight reads its config.json; download it first", path=value)
    return read_checkpoint(path, what)
