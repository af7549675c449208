"""Compare the proof stage's statement reading of bindings with libcst's ScopeProvider, file by file.

    python tools/scopes_against_libcst.py 0.5.9 0.5.23      # every source file below srt/ of each release

The suite (tests/test_scopes.py) compares a sample of one release's models/; this runs the same
comparison over every file of the releases named (cached by tests/sglang_releases.py), reduced as
the proof stage reduces them, and prints each file that differs. Exit 1 when one does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from sglang_releases import site_packages  # noqa: E402
from test_scopes import reading_against_scope_provider  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("releases", nargs="+", help="sglang releases, e.g. 0.5.9 0.5.23")
    args = parser.parse_args()
    compared = fell_back = differ = 0
    for release in args.releases:
        for path in sorted((site_packages(release) / "sglang" / "srt").rglob("*.py")):
            outcome = reading_against_scope_provider(path)
            if outcome == "provider":
                fell_back += 1  # the ScopeProvider answers for this file in the proof stage too
            elif outcome is not None:
                compared += 1
                if outcome == "differs":
                    differ += 1
                    print(f"differs: {path}")
    print(f"{compared} files compared, {differ} differ; {fell_back} read by the ScopeProvider itself")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
