"""Rewrite tests/releases.txt from ``pip index versions sglang`` (``make update-releases``).

The pinned list is what the tests and ``make history`` run on; it changes only when
someone runs this on purpose and commits the diff. Releases older than the file's
current oldest one are not added (``--low`` moves that bound).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sglang_releases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--low", help="oldest release to keep (default: the file's current oldest)")
    parser.add_argument("--file", type=Path, default=sglang_releases.RELEASES_FILE)
    args = parser.parse_args(argv)
    try:
        before, after = sglang_releases.update_releases(args.file, args.low)
    except sglang_releases.ReleaseError as exc:
        print(f"update-releases: {exc}", file=sys.stderr)
        return 1
    added = [v for v in after if v not in before]
    dropped = [v for v in before if v not in after]
    print(f"{args.file}: {len(after)} releases, {after[0]} .. {after[-1]}")
    print(f"  added: {', '.join(added) or 'none'}")
    print(f"  dropped: {', '.join(dropped) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
