"""`--installed`: the sglang that the user's Python would import, found without importing it.

eaglepatch may live in its own environment (pipx); the target is whatever `python` on PATH
(an active virtual environment) or `--python` resolves `sglang` to.  `find_spec` on a
top-level package locates it without running its `__init__` (which would pull in torch).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from ..errors import EaglepatchError

_PROBE = (
    "import importlib.util, json, sys\n"
    "spec = importlib.util.find_spec('sglang')\n"
    "print(json.dumps({'locations': list(spec.submodule_search_locations or []) if spec else None,"
    " 'python': sys.executable}))\n"
)


def installed_sglang(python: str | None = None) -> Path:
    """The `sglang` package folder of that interpreter."""
    exe = python or shutil.which("python") or shutil.which("python3")
    if exe is None:
        raise EaglepatchError("no `python` on PATH; pass --python /path/to/python", path="--installed")
    try:
        done = subprocess.run([exe, "-c", _PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EaglepatchError(f"cannot run it ({exc}); pass --python with a working interpreter", path=exe) from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EaglepatchError(f"failed to look for sglang ({last})", path=exe)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    locations = found.get("locations")
    if not locations:
        raise EaglepatchError(
            "has no sglang installed; activate the environment that has it, or pass --python", path=found["python"]
        )
    return Path(locations[0])
