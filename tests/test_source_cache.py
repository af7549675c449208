"""SourceCache.memo: what a stage derives once per run is kept under the stage's own typed key."""

from __future__ import annotations

from eaglepatch.read.imports import ImportTable, defined_here
from eaglepatch.read.locate import SourceTree
from eaglepatch.read.source_cache import MemoKey, SourceCache


def test_a_memo_slot_is_made_once_and_belongs_to_its_key_alone(tmp_path):
    cache = SourceCache(tmp_path)
    first, second = MemoKey[list[int]]("numbers"), MemoKey[list[int]]("numbers")  # same name, other slot
    made: list[str] = []

    def make(label: str) -> list[int]:
        made.append(label)
        return []

    cache.memo(first, lambda: make("first")).append(1)
    assert cache.memo(first, lambda: make("again")) == [1]
    assert cache.memo(second, lambda: make("second")) == []
    assert made == ["first", "second"]
    assert SourceCache(tmp_path).memo(first, lambda: [7]) == [7]  # one run's memo, not another's


def test_the_read_stage_keeps_one_table_per_file_a_run(tmp_path):
    srt = tmp_path / "sglang" / "srt"
    srt.mkdir(parents=True)
    (srt / "m.py").write_text("import os\nfrom .x import y as z\nclass A:\n    pass\nN = 1\n")
    tree = SourceTree(srt, tmp_path, "srt")
    cache = SourceCache(srt)
    source = cache.read(srt / "m.py")
    table = ImportTable.of(cache, source, tree)
    assert ImportTable.of(cache, source, tree) is table and {"os", "z"} <= set(table.names)
    assert defined_here(cache, source) is defined_here(cache, source) == {"A", "N"}
    assert ImportTable.of(SourceCache(srt), source, tree) is not table
