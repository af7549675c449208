"""Stage table for codemods/normalize_imports.py: where an import this run adds goes, as (source, expected).

Each case runs libcst's AddImportsVisitor (what the codemod schedules) and then the normalizer,
and each expected text is checked to be a fixed point of isort (black profile) and black: the
tree's own hooks must not rewrite what apply wrote.
"""

from __future__ import annotations

import black
import isort
import libcst as cst
import pytest
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from eaglepatch.codemods.normalize_imports import NormalizeAddedImports, isort_key

ADD = {"typing": {"List", "Optional"}}

CASES = [
    pytest.param(
        "from typing import Any, Dict, Iterable, Optional, Tuple, Union\n",
        "from typing import Any, Dict, Iterable, List, Optional, Tuple, Union\n",
        id="merged-into-one-line-sorted",
    ),
    pytest.param(
        "from typing import (\n    Callable,\n    Final,\n    Iterable,\n    Literal,\n    Optional,\n    Sequence,\n)\n",
        "from typing import (\n    Callable,\n    Final,\n    Iterable,\n    List,\n    Literal,\n    Optional,\n    Sequence,\n)\n",
        id="merged-into-exploded-sorted",
    ),
    pytest.param(
        '"""doc"""\n\nfrom collections.abc import Iterable\nfrom functools import partial\n\nimport torch\nfrom torch import nn\n\nX = 1\n',
        '"""doc"""\n\nfrom collections.abc import Iterable\nfrom functools import partial\nfrom typing import List, Optional\n\nimport torch\nfrom torch import nn\n\nX = 1\n',
        id="new-line-joins-the-stdlib-block-in-order",
    ),
    pytest.param(
        "import logging\nimport os\n\nimport torch\n",
        "import logging\nimport os\nfrom typing import List, Optional\n\nimport torch\n",
        id="from-lines-after-plain-imports",
    ),
    pytest.param(
        "from __future__ import annotations\n\nimport torch\n",
        "from __future__ import annotations\n\nfrom typing import List, Optional\n\nimport torch\n",
        id="opens-a-stdlib-block-after-future",
    ),
]


def _run(source: str) -> str:
    before = cst.parse_module(source)
    context = CodemodContext()
    for module, names in ADD.items():
        for name in sorted(names):
            AddImportsVisitor.add_needed_import(context, module, name)
    merged = AddImportsVisitor(context).transform_module(before)
    return merged.visit(NormalizeAddedImports(ADD, before)).code


@pytest.mark.parametrize("source, expected", CASES)
def test_added_import_placement(source: str, expected: str):
    assert _run(source) == expected
    assert isort.code(expected, profile="black") == expected
    assert black.format_str(expected, mode=black.Mode()) == expected


def test_a_file_in_its_own_order_keeps_it():
    """Names not in isort's order: isort rewrites that line anyway; the added ones are not shuffled in."""
    assert _run("from typing import Optional, Iterable\n") == "from typing import List, Optional, Iterable\n"


@pytest.mark.parametrize(
    "names",
    [["MAX_LEN", "Any", "List", "cast", "overload"], ["TYPE_CHECKING", "Callable", "Optional", "get_args"]],
)
def test_isort_key_is_isorts_order(names):
    line = f"from typing import {', '.join(reversed(names))}\n"
    sorted_line = isort.code(line, profile="black")
    assert sorted(names, key=isort_key) == sorted_line.split("import ")[1].strip().split(", ")


# The tree's own settings (patcher/read/style.py): the width an import wraps at, isort's
# force_sort_within_sections and order_by_type.  (source, names added, settings, expected); each
# expected text is a fixed point of isort and black run with the same settings.
LONG = {"sglang.srt.layers.quantization.base_config": {"QuantizationConfig", "QuantizeMethodBase"}}
STYLED = [
    pytest.param(
        "from sglang.srt.models.qwen2 import Qwen2Model\nfrom sglang.srt.utils import add_prefix\n",
        {"sglang.srt.platforms": {"current_platform"}, "sglang.srt.runtime_context": {"get_parallel"}},
        {"line_length": 88},
        "from sglang.srt.models.qwen2 import Qwen2Model\nfrom sglang.srt.platforms import current_platform\n"
        "from sglang.srt.runtime_context import get_parallel\nfrom sglang.srt.utils import add_prefix\n",
        id="two-new-lines-of-one-package-each-in-its-place",
    ),
    pytest.param(
        "from sglang.srt.layers.quantization.base_config import QuantizationConfig\n",
        LONG,
        {"line_length": 100},
        "from sglang.srt.layers.quantization.base_config import QuantizationConfig, QuantizeMethodBase\n",
        id="merged-line-of-94-fits-100",
    ),
    pytest.param(
        "from sglang.srt.layers.quantization.base_config import QuantizationConfig\n",
        LONG,
        {"line_length": 88},
        "from sglang.srt.layers.quantization.base_config import (\n    QuantizationConfig,\n    QuantizeMethodBase,\n)\n",
        id="merged-line-of-94-wraps-at-88",
    ),
    pytest.param(
        "import os\nfrom typing import Any\n",
        {"typing": {"Any"}, "collections": {"OrderedDict"}},
        {"line_length": 79, "force_sort_within_sections": True},
        "from collections import OrderedDict\nimport os\nfrom typing import Any\n",
        id="force-sort-within-sections-places-from-among-imports",
    ),
    pytest.param(
        "import os\nfrom typing import Any\n",
        {"typing": {"Any"}, "collections": {"OrderedDict"}},
        {"line_length": 79},
        "import os\nfrom collections import OrderedDict\nfrom typing import Any\n",
        id="plain-imports-first-without-it",
    ),
    pytest.param(
        "from typing import Any, Optional\n",
        {"typing": {"TYPE_CHECKING", "cast"}},
        {"line_length": 88, "order_by_type": False},
        "from typing import Any, cast, Optional, TYPE_CHECKING\n",
        id="order-by-type-off-is-case-insensitive",
    ),
    pytest.param(
        "from typing import Any, Optional\n",
        {"typing": {"TYPE_CHECKING", "cast"}},
        {"line_length": 88},
        "from typing import TYPE_CHECKING, Any, Optional, cast\n",
        id="order-by-type",
    ),
    pytest.param(  # the paragraph's last line: the blank line after it stays before the code it belongs to
        "import os\n\nfrom sglang.srt.a import B\n\nX = 1\n",
        {"sglang.srt.z": {"Z"}},
        {"line_length": 88},
        "import os\n\nfrom sglang.srt.a import B\nfrom sglang.srt.z import Z\n\nX = 1\n",
        id="package-line-ends-its-paragraph-before-the-code",
    ),
    pytest.param(  # ... and before the next paragraph of imports
        "import os\n\nfrom sglang.srt.a import B\n\nfrom .b import C\n",
        {"sglang.srt.z": {"Z"}},
        {"line_length": 88},
        "import os\n\nfrom sglang.srt.a import B\nfrom sglang.srt.z import Z\n\nfrom .b import C\n",
        id="package-line-ends-its-paragraph-before-the-next",
    ),
    pytest.param(  # the paragraph's first line: the new line opens it, with its blank lines
        "import os\n\nfrom sglang.srt.m import B\n\nX = 1\n",
        {"sglang.srt.a": {"A"}},
        {"line_length": 88},
        "import os\n\nfrom sglang.srt.a import A\nfrom sglang.srt.m import B\n\nX = 1\n",
        id="package-line-opens-its-paragraph",
    ),
]


@pytest.mark.parametrize("source, add, settings, expected", STYLED)
def test_added_imports_follow_the_trees_settings(source, add, settings, expected):
    before = cst.parse_module(source)
    context = CodemodContext()
    for module, names in add.items():
        for name in sorted(names):
            AddImportsVisitor.add_needed_import(context, module, name)
    merged = AddImportsVisitor(context).transform_module(before)
    width = settings["line_length"]
    fss, obt = settings.get("force_sort_within_sections", False), settings.get("order_by_type", True)
    assert merged.visit(NormalizeAddedImports(add, before, width, fss, obt)).code == expected
    config = isort.Config(profile="black", line_length=width, force_sort_within_sections=fss, order_by_type=obt)
    assert isort.code(expected, config=config) == expected
    assert black.format_str(expected, mode=black.Mode(line_length=width)) == expected
