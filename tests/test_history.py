"""The release-history ground truth (bench/history.py).

Unit tests build tiny before/after ``site-packages`` trees in tmp_path; the integration
test reads the real 0.5.9 -> 0.5.10 pair, where upstream added the three EAGLE-3 hooks to
the Kimi K2.5 wrapper as delegations to ``language_model``.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("eaglepatch_history", REPO / "bench" / "history.py")
history = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = history  # dataclasses look their module up
_spec.loader.exec_module(history)

HOOKS = ["get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture"]
NAMES = HOOKS + ["hot_token_id", "set_embed"]


def tree(root: Path, files: dict[str, str]) -> Path:
    """A site-packages folder at ``root`` holding ``sglang/srt/<rel>`` for each file."""
    for rel, text in files.items():
        path = root / "sglang" / "srt" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def fixes(tmp_path, before: dict, after: dict, names=NAMES):
    truth = history.upstream_fixes(tree(tmp_path / "R", before), tree(tmp_path / "R1", after), names)
    return truth, {(f.cls, f.member): f for f in truth.fixes}


LLAMA = """
    class LlamaForCausalLM:
        def get_embed_and_head(self):
            return self.model.embed_tokens.weight, self.lm_head.weight

        def set_eagle3_layers_to_capture(self, layer_ids=None):
            self.capture_aux_hidden_states = True

    EntryClass = LlamaForCausalLM
"""

WRAPPER = """
    from sglang.srt.models.llama import LlamaForCausalLM

    class Wrapper:
        def __init__(self, config):
            self.language_model = LlamaForCausalLM(config)

        def forward(self, x):
            return self.language_model(x)
    {extra}
    EntryClass = [Wrapper]
"""


def test_a_member_added_by_hand_is_one_fix(tmp_path):
    truth, found = fixes(
        tmp_path,
        {"models/llama.py": LLAMA, "models/wrap.py": WRAPPER.format(extra="")},
        {"models/llama.py": LLAMA, "models/wrap.py": WRAPPER.format(extra="""
        def get_embed_and_head(self):
            embed, head = self.language_model.get_embed_and_head()
            return embed, head

        def helper_nobody_calls(self):
            return 1
    """)},
    )
    assert list(found) == [("Wrapper", "get_embed_and_head")]  # helper_nobody_calls: not in the protocol
    fix = found[("Wrapper", "get_embed_and_head")]
    assert (fix.file, fix.old_file, fix.shape, fix.to) == ("models/wrap.py", "models/wrap.py", "delegation", "language_model")
    assert truth.compared == 2 and truth.new_classes == [] and truth.moved == []


def test_an_inherited_member_is_no_fix(tmp_path):
    base = """
        class Base:
            def get_embed_and_head(self):
                return self.embed, self.head

            @property
            def hot_token_id(self):
                return None
    """
    before = {
        "models/base.py": base,
        "models/child.py": """
            from .base import Base

            class Child(Base):
                pass

            EntryClass = Child
        """,
    }
    after = {
        "models/base.py": base,
        "models/child.py": """
            from .base import Base

            class Child(Base):
                def get_embed_and_head(self):  # an override: Child had it already
                    return self.other_embed, self.head

            EntryClass = Child
        """,
    }
    truth, found = fixes(tmp_path, before, after)
    assert found == {}
    assert truth.compared == 1


def test_members_come_through_absolute_imports_aliases_and_module_attributes(tmp_path):
    files = {
        "models/base.py": """
            class Base:
                def set_embed(self, embed):
                    self.embed = embed
        """,
        "models/reexport.py": "from sglang.srt.models.base import Base as Renamed\n",
        "models/a.py": """
            from sglang.srt.models.reexport import Renamed

            class A(Renamed):
                pass

            EntryClass = A
        """,
        "models/b.py": """
            import sglang.srt.models.base as base_module

            class B(base_module.Base):
                pass

            EntryClass = B
        """,
    }
    site = tree(tmp_path / "T", files)
    source = history.SourceTree(site)
    for rel, cls in (("models/a.py", "A"), ("models/b.py", "B")):
        members = source.members(source.find_class(rel, cls))
        assert members["set_embed"].owner_file == "models/base.py", (rel, members)
        assert "embed" not in members  # set in set_embed, not in __init__


def test_delegation_versus_body(tmp_path):
    before = {"models/llama.py": LLAMA, "models/wrap.py": WRAPPER.format(extra="")}
    after = {"models/llama.py": LLAMA, "models/wrap.py": WRAPPER.format(extra="""
        def get_embed_and_head(self):
            return self.language_model.get_embed_and_head()

        def set_embed_and_head(self, embed, head):
            self.language_model.model.embed_tokens.weight = embed
            self.language_model.lm_head.weight = head

        def set_eagle3_layers_to_capture(self, layer_ids=None):
            self.language_model.model.set_eagle3_layers_to_capture(layer_ids)

        @property
        def hot_token_id(self):
            return self.language_model.hot_token_id
    """)}
    _, found = fixes(tmp_path, before, after)
    shapes = {member: (fix.shape, fix.to) for (_, member), fix in found.items()}
    assert shapes == {
        "get_embed_and_head": ("delegation", "language_model"),
        "set_embed_and_head": ("body", None),  # reaches other members, not set_embed_and_head
        "set_eagle3_layers_to_capture": ("delegation", "language_model.model"),
        "hot_token_id": ("delegation", "language_model"),
    }


def test_a_method_that_sets_its_own_state_before_calling_the_backbone_is_a_body(tmp_path):
    """Qwen3.5's hook (0.5.22) turns capture on and shifts the layers before calling self.model's."""
    before = {"models/llama.py": LLAMA, "models/wrap.py": WRAPPER.format(extra="")}
    after = {"models/llama.py": LLAMA, "models/wrap.py": WRAPPER.format(extra="""
        def set_eagle3_layers_to_capture(self, layer_ids=None):
            self.capture_aux_hidden_states = True
            self.model.set_eagle3_layers_to_capture([i + 1 for i in layer_ids or []])
    """)}
    _, found = fixes(tmp_path, before, after)
    (fix,) = found.values()
    assert (fix.member, fix.shape, fix.to) == ("set_eagle3_layers_to_capture", "body", None)


def test_a_member_gained_through_a_base_class_is_an_inherited_fix(tmp_path):
    old_base = "class Base:\n    pass\n"
    new_base = "class Base:\n    def get_embed_and_head(self):\n        return self.e, self.h\n"
    child = """
        from sglang.srt.models.base import Base

        class Child(Base):
            pass

        EntryClass = [Child]
    """
    _, found = fixes(
        tmp_path,
        {"models/base.py": old_base, "models/child.py": child},
        {"models/base.py": new_base, "models/child.py": child},
    )
    fix = found[("Child", "get_embed_and_head")]
    assert (fix.shape, fix.to) == ("inherited", "models/base.py:Base")


def test_a_moved_file_is_matched_by_class_name(tmp_path):
    truth, found = fixes(
        tmp_path,
        {"models/qwen_old.py": """
            class QwenForCausalLM:
                def forward(self, x):
                    return x

            EntryClass = QwenForCausalLM
        """},
        {"models/qwen_text.py": """
            class QwenForCausalLM:
                def forward(self, x):
                    return x

                def get_embed_and_head(self):
                    return self.model.embed_tokens.weight, self.lm_head.weight

            EntryClass = QwenForCausalLM
        """},
    )
    fix = found[("QwenForCausalLM", "get_embed_and_head")]
    assert (fix.old_file, fix.file, fix.shape) == ("models/qwen_old.py", "models/qwen_text.py", "body")
    assert truth.moved == [{"class": "QwenForCausalLM", "from": "models/qwen_old.py", "to": "models/qwen_text.py"}]


def test_new_classes_and_getattr_forwarding_are_not_fixes(tmp_path):
    truth, found = fixes(
        tmp_path,
        {"models/m.py": """
            class Forwarder:
                def __getattr__(self, name):
                    return getattr(self.inner, name)

            EntryClass = Forwarder
        """},
        {"models/m.py": """
            class Forwarder:
                def get_embed_and_head(self):
                    return self.inner.get_embed_and_head()

            class Brand:
                def get_embed_and_head(self):
                    return 1, 2

            EntryClass = [Forwarder, Brand]
        """},
    )
    assert found == {}
    assert truth.new_classes == ["models/m.py:Brand"]
    assert truth.dynamic_in_old == [{
        "file": "models/m.py", "class": "Forwarder", "members": ["get_embed_and_head"],
        "getattr": "models/m.py:Forwarder",
    }]


def test_class_level_assignments_and_init_attributes_are_members(tmp_path):
    before = {"models/d.py": "class Draft:\n    pass\nEntryClass = Draft\n"}
    after = {"models/d.py": """
        class Draft:
            set_embed = None

            def __init__(self, config):
                self.hot_token_id = config.hot

        EntryClass = Draft
    """}
    _, found = fixes(tmp_path, before, after)
    assert {m: f.shape for (_, m), f in found.items()} == {"set_embed": "assignment", "hot_token_id": "attribute"}


def test_side_comes_from_the_roles_of_the_uses():
    report_old = {"protocol": [{"name": "get_embed_and_head", "uses": [{"role": "target"}]}]}
    report_new = {"protocol": [
        {"name": "set_eagle3_layers_to_capture", "uses": [{"role": "unknown"}]},
        {"name": "set_embed_and_head", "uses": [{"role": "draft"}, {"role": "draft"}]},
        {"name": "get_embed_and_head", "uses": [{"role": "draft"}]},
    ]}
    roles = history.merged_roles(report_new, report_old)
    assert history.side("get_embed_and_head", roles) == "target"  # target in R, draft in R+1
    assert history.side("set_eagle3_layers_to_capture", roles) == "target"
    assert history.side("set_embed_and_head", roles) == "draft"


def test_verdict_reads_both_contracts():
    old = {"models": [
        {"file": "models/a.py", "class": "A", "status": "delegable",
         "missing": [{"name": "get_embed_and_head", "required": True}],
         "not_delegable": [{"name": "hot_token_id", "required": True}]},
        {"file": "models/b.py", "class": "B", "status": "not_delegable", "missing": [],
         "not_delegable": [{"name": "set_embed", "required": True}]},
    ]}
    assert history.verdict(old, "models/a.py", "A", "get_embed_and_head") == {
        "listed": True, "status_in_old": "delegable", "reported": True, "required": True, "written": True,
        "fix_to": None, "fix_kind": None, "fix_from": None, "blocker": None}
    assert history.verdict(old, "models/a.py", "A", "hot_token_id")["written"] is False
    assert history.verdict(old, "models/b.py", "B", "set_embed")["reported"] is True
    assert history.verdict(old, "models/b.py", "B", "set_embed")["written"] is False
    assert history.verdict(old, "models/c.py", "C", "set_embed")["listed"] is False

    new = {"schema": 2, "models": [
        {"file": "models/a.py", "class": "A", "status": "needs_code", "role": "target", "missing": [
            {"name": "get_embed_and_head", "required": True, "fix": {"kind": "delegate", "to": "language_model"}, "blocker": None},
            {"name": "set_eagle3_layers_to_capture", "required": True, "fix": None, "blocker": "no inner model"},
        ]},
    ]}
    assert history.verdict(new, "models/a.py", "A", "get_embed_and_head")["written"] is True
    assert history.verdict(new, "models/a.py", "A", "get_embed_and_head")["fix_to"] == "language_model"
    got = history.verdict(new, "models/a.py", "A", "set_eagle3_layers_to_capture")
    assert (got["reported"], got["written"]) == (True, False)
    assert (got["fix_kind"], got["blocker"]) == (None, "no inner model")
    assert history.verdict(new, "models/a.py", "A", "get_embed_and_head")["fix_kind"] == "delegate"
    assert history.verdict(new, "models/a.py", "A", "hot_token_id")["reported"] is False


@pytest.mark.integration
def test_real_0_5_9_to_0_5_10_kimi_hooks_are_delegations():
    import sglang_releases

    old, new = "0.5.9", "0.5.10"
    reports = {v: history.check_report(v) for v in (old, new)}
    names = sorted(history.merged_roles(reports[new], reports[old]))
    assert set(HOOKS) <= set(names), names
    truth = history.upstream_fixes(sglang_releases.site_packages(old), sglang_releases.site_packages(new), names, old, new)
    kimi = {f.member: f for f in truth.fixes if f.cls == "KimiK25ForConditionalGeneration"}
    assert set(HOOKS) <= set(kimi), [(f.cls, f.member) for f in truth.fixes]
    for member in HOOKS:
        fix = kimi[member]
        assert (fix.file, fix.shape, fix.to) == ("models/kimi_k25.py", "delegation", "language_model"), fix
        said = history.verdict(reports[old], fix.old_file, fix.cls, member)
        assert said["listed"] and said["reported"], said
    assert truth.parse_errors == [] and truth.unresolved == []


@pytest.mark.integration
def test_the_command_line_measures_a_pair_and_writes_its_json(tmp_path):
    """`bench/history.py` as `make history` runs it, on the first pinned pair: a whole run through the
    command line (the stage move once broke only that), with --eaglepatch naming this checkout."""
    import json
    import os
    import subprocess

    out = tmp_path / "history.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "history.py"), "--low", "0.5.9", "--high", "0.5.10", "--no-cache",
         "--jobs", "1", "--eaglepatch", str(REPO), "--json", str(out)],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    assert [(p["old"], p["new"]) for p in data["pairs"]] == [("0.5.9", "0.5.10")]
    kimi = {f["member"] for f in data["pairs"][0]["fixes"] if f["cls"] == "KimiK25ForConditionalGeneration"}
    assert set(HOOKS) <= kimi
    for row in data["table"]:
        assert row["written"] <= row["reported"] <= row["listed"] <= row["fixes"], row
    assert f"wrote {out}" in done.stderr


# --------------------------------------------------------------------------- hook bodies on a bare backbone

CAPTURE = """
def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None):
    if not get_pp_group().is_last_rank:
        return
    self.capture_aux_hidden_states = True
    if layer_ids is None:
        num_layers = self.config.num_hidden_layers
        self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
    else:
        self.model.layers_to_capture = [val + 1 for val in layer_ids]
"""

# The same behaviour written another way: the layer count from the backbone, one assignment.
CAPTURE_REWRITTEN = """
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        # indented as in a class body
        if self.pp_group.is_last_rank:
            n = len(self.model.layers)
            chosen = [2, n // 2, n - 3] if layer_ids is None else [i + 1 for i in layer_ids]
            self.model.layers_to_capture = chosen
            self.capture_aux_hidden_states = True
"""

HEAD = "def get_embed_and_head(self):\n    return self.model.embed_tokens.weight, self.lm_head.weight\n"


def test_two_bodies_that_do_the_same_behave_alike():
    got = history.compare_bodies(CAPTURE, CAPTURE_REWRITTEN, "set_eagle3_layers_to_capture")
    assert got == {"behaves_as_upstream": True, "differences": [], "not_compared": ""}
    got = history.compare_bodies(HEAD, "def get_embed_and_head(self):\n    e = self.model.embed_tokens\n    return (e.weight, self.lm_head.weight)\n", "get_embed_and_head")
    assert got["behaves_as_upstream"] is True


def test_a_shifted_layer_list_is_a_difference_after_the_explicit_call_only():
    unshifted = CAPTURE.replace("[val + 1 for val in layer_ids]", "[val for val in layer_ids]")
    got = history.compare_bodies(CAPTURE, unshifted, "set_eagle3_layers_to_capture")
    assert got["behaves_as_upstream"] is False and got["not_compared"] == ""
    assert got["differences"] == [{
        "call": "set_eagle3_layers_to_capture([1, 5, 9])", "what": "self.model.layers_to_capture",
        "eaglepatch": [2, 6, 10], "upstream": [1, 5, 9],
    }]


def test_a_flag_only_one_body_sets_and_a_tied_head_are_differences():
    also_backbone = CAPTURE + "    self.model.capture_aux_hidden_states = True\n"
    got = history.compare_bodies(CAPTURE, also_backbone, "set_eagle3_layers_to_capture")
    assert got["behaves_as_upstream"] is False
    assert {(d["call"], d["what"], d["eaglepatch"], d["upstream"]) for d in got["differences"]} == {
        ("set_eagle3_layers_to_capture(None)", "self.model.capture_aux_hidden_states", "<not set>", True),
        ("set_eagle3_layers_to_capture([1, 5, 9])", "self.model.capture_aux_hidden_states", "<not set>", True),
    }
    tied = "def get_embed_and_head(self):\n    embed = self.model.embed_tokens.weight\n    return embed, embed\n"
    (difference,) = history.compare_bodies(HEAD, tied, "get_embed_and_head")["differences"]
    assert difference["what"] == "returned"
    assert difference["eaglepatch"] != difference["upstream"]


def test_set_embed_and_head_compares_what_is_left_in_place():
    swap = (
        "def set_embed_and_head(self, embed, head):\n"
        "    del self.model.embed_tokens.weight\n"
        "    del self.lm_head.weight\n"
        "    self.model.embed_tokens.weight = embed\n"
        "    self.lm_head.weight = head\n"
        "    torch.cuda.empty_cache()\n"
        "    torch.cuda.synchronize()\n"
    )
    platform = swap.replace("torch.cuda.", "current_platform.")
    assert history.compare_bodies(swap, platform, "set_embed_and_head")["behaves_as_upstream"] is True
    head_only = swap.replace("    self.model.embed_tokens.weight = embed\n", "")
    (difference,) = history.compare_bodies(swap, head_only, "set_embed_and_head")["differences"]
    assert (difference["what"], difference["eaglepatch"], difference["upstream"]) == (
        "self.model.embed_tokens.weight", "<new embed>", "<not set>")


@pytest.mark.parametrize("upstream, read", [
    ("def get_embed_and_head(self):\n    return self._shard_weight(self.model.embed_tokens.weight), self.lm_head.weight\n",
     "self._shard_weight"),
    ("def get_embed_and_head(self):\n    return self.model.start_layer, self.lm_head.weight\n", "self.model.start_layer"),
    ("def get_embed_and_head(self):\n    return shard(self.lm_head.weight), None\n", "the module-level name shard"),
    ("def get_embed_and_head(self):\n    return torch.cat([self.lm_head.weight]), None\n", "torch.cat"),
    # the body swallows the failure: the stub still knows it was asked for something it lacks
    ("def get_embed_and_head(self):\n    try:\n        return self.visual.weight, None\n    except Exception:\n        return None, None\n",
     "self.visual"),
])
def test_a_body_reading_what_the_stub_lacks_is_not_compared(upstream, read):
    got = history.compare_bodies(HEAD, upstream, "get_embed_and_head")
    assert got["behaves_as_upstream"] is None and got["differences"] == []
    assert got["not_compared"] == f"upstream's body reads {read}, which the stub does not hold"


def test_a_member_without_calls_is_not_compared():
    got = history.compare_bodies("def f(self):\n    return 1\n", "def f(self):\n    return 2\n", "f")
    assert got["behaves_as_upstream"] is None and "no calls" in got["not_compared"]


def test_the_backbone_attribute_is_the_one_given():
    body = HEAD.replace("self.model.", "self.language_model.")
    assert history.compare_bodies(body, body, "get_embed_and_head", backbone="language_model")["behaves_as_upstream"] is True
    assert history.compare_bodies(body, body, "get_embed_and_head")["behaves_as_upstream"] is None


BARE = """
    from sglang.srt.models.backbone import Backbone, CausalLM

    class Bare:
        def __init__(self, config):
            self.model = Backbone(config)
            self.lm_head = object()
    {extra}
    class Whole:
        def __init__(self, config):
            self.language_model = CausalLM(config)
    {extra_whole}
    EntryClass = [Bare, Whole]
"""
BACKBONE = """
    class Backbone:
        def __init__(self, config):
            self.layers_to_capture = []

    class CausalLM:
        def __init__(self, config):
            self.model = Backbone(config)
            self.lm_head = object()
"""


def test_a_body_on_a_bare_backbone_names_it_and_one_on_a_whole_causal_lm_does_not(tmp_path):
    hook = """
        def get_embed_and_head(self):
            return self.{attr}.embed_tokens.weight, self.{head}
    """
    before = {"models/backbone.py": BACKBONE, "models/m.py": BARE.format(extra="", extra_whole="")}
    after = {"models/backbone.py": BACKBONE, "models/m.py": BARE.format(
        extra=hook.format(attr="model", head="lm_head.weight"),
        extra_whole=hook.format(attr="language_model.model", head="language_model.lm_head.weight"))}
    _, found = fixes(tmp_path, before, after)
    assert found[("Bare", "get_embed_and_head")].backbone == "model"
    assert found[("Whole", "get_embed_and_head")].backbone is None  # language_model has an lm_head


def test_the_last_def_of_a_name_is_the_one_read(tmp_path):
    site = tree(tmp_path / "T", {"models/m.py": """
        class A:
            def get_embed_and_head(self):
                return 1

            def get_embed_and_head(self):
                return 2
    """})
    source = history.SourceTree(site)
    member = source.members(source.find_class("models/m.py", "A"))["get_embed_and_head"]
    assert member.line == 6
    assert "return 2" in history.method_source(site, "models/m.py", "A", "get_embed_and_head")


def test_a_plumbing_blocker_is_checked_against_the_method_in_the_next_release(tmp_path):
    forward_old = """
        class Base:
            def forward(self, x):
                return self.model(x)

        class Sub(Base):
            pass
    """
    forward_new = """
        class Base:
            def forward(self, x):
                hidden = self.model(x)
                if self.capture_aux_hidden_states:
                    hidden, aux = hidden
                return hidden
    """
    old = tree(tmp_path / "R", {"models/m.py": forward_old})
    new = tree(tmp_path / "R1", {"models/m.py": forward_new})
    blocker = ("holds a bare backbone (model: M) beside its own lm_head: Sub.forward (models/m.py:3) does not unpack "
               "aux hidden states when capture_aux_hidden_states is set; compare L.forward (models/l.py:9)")
    got = history.plumbing_check(blocker, old, new)
    assert got == {"names": "models/m.py:Base.forward", "lacks": "does not unpack aux hidden states",
                   "changed_in_new": True, "reads_it_in_new": True}
    assert history.plumbing_check(blocker, old, old)["reads_it_in_new"] is False
    assert history.plumbing_check("no class of this tree implements it", old, new) is None


def test_an_inherit_fix_is_followed_to_the_base_that_learns_the_body():
    report = {"schema": 2, "models": [
        {"file": "models/mid.py", "class": "Mid", "missing": [
            {"name": "get_embed_and_head", "fix": {"kind": "inherit", "from": "models/base.py:Base"}}]},
        {"file": "models/base.py", "class": "Base", "missing": [
            {"name": "get_embed_and_head", "fix": {"kind": "synthesize", "from": "models/llama.py:Llama"}}]},
    ]}
    row = {"old_file": "models/leaf.py", "cls": "Leaf", "member": "get_embed_and_head",
           "fix_kind": "inherit", "fix_from": "models/mid.py:Mid"}
    assert history.learned_in(row, report) == ("models/base.py", "Base")
    assert history.learned_in({**row, "fix_kind": "synthesize"}, report) == ("models/leaf.py", "Leaf")
    assert history.learned_in({**row, "fix_kind": "delegate", "fix_from": None}, report) is None
    unlisted = {**row, "fix_from": "models/other.py:Other"}
    assert history.learned_in(unlisted, report) == ("models/other.py", "Other")  # explain decides


# --------------------------------------------------------------------------- plumbing: upstream's and apply's

@pytest.mark.parametrize("source, expected", [
    ("def forward(self, x):\n    return self.model(x)\n", False),
    ("def forward(self, x):\n    # aux_hidden_states are not collected here\n    return 'layers_to_capture'\n", False),
    ("def forward(self, x):\n    aux_hidden_states = []\n    return x\n", True),
    ("def forward(self, x):\n    if 3 in self.layers_to_capture:\n        pass\n", True),
    ("def forward(self, x):\n    return self.logits_processor(x, aux_hidden_states=None)\n", True),
    ("def forward(self, x):\n    return self.capture_aux_hidden_states\n", False),  # the flag alone carries nothing
    (None, None),
])
def test_a_forward_carries_aux_states_when_its_code_uses_them(source, expected):
    assert history.carries_aux(source) is expected


@pytest.mark.parametrize("kind, source, expected", [
    ("flag-default", "def __init__(self):\n    self.capture_aux_hidden_states = False\n", True),
    ("flag-default", "def __init__(self):\n    self.capture_aux_hidden_states = True\n", False),
    ("selector-default", "def __init__(self):\n    self.layers_to_capture = []\n", True),
    ("selector-default", "def __init__(me):\n    me.layers_to_capture = list()\n", True),
    ("selector-default", "def __init__(self):\n    self.layers_to_capture = [2, 3]\n", False),
    ("index", "def forward(self):\n    for i, layer in enumerate(self.layers):\n        h = layer(h)\n", True),
    ("index", "def forward(self):\n    for layer in self.layers:\n        h = layer(h)\n", False),
    ("aux-init", "def forward(self):\n    aux_hidden_states = []\n", True),
    ("aux-init", "def forward(self):\n    aux_hidden_states = None\n", False),
    ("capture", "def forward(self):\n    for i, layer in enumerate(self.layers):\n"
                "        if i in self.layers_to_capture:\n            aux_hidden_states.append(h)\n", True),
    ("capture", "def forward(self):\n    aux_hidden_states.append(h)\n", False),  # not in the layer loop
    ("tail", "def forward(self):\n    return hidden_states, aux_hidden_states\n", True),
    ("tail", "def forward(self):\n    return hidden_states\n", False),
    ("unpack", "def forward(self):\n    hidden_states, aux_hidden_states = hidden_states\n", True),
    ("unpack", "def forward(self):\n    aux_hidden_states = None\n", False),
    ("logits-aux", "def forward(self):\n    return self.logits_processor(ids, h, self.lm_head, batch, aux_hidden_states)\n", True),
    ("logits-aux", "def forward(self):\n    return self.logits_processor(ids, h, aux_hidden_states=aux)\n", True),
    ("logits-aux", "def forward(self):\n    return self.logits_processor(ids, h, self.lm_head, batch)\n", False),
    ("logits-aux", None, None),
    ("no-such-kind", "def forward(self):\n    pass\n", None),
])
def test_each_piece_kind_is_found_by_its_own_shape(kind, source, expected):
    assert history.piece_alike(kind, source) is expected


PLUMBED_BACKBONE = """
    class Backbone:
        def __init__(self, config):
            self.layers = []
            {init}

        def forward(self, x):
            {forward}
            return x
"""
PLUMBED_CLASS = """
    from sglang.srt.models.backbone import Backbone

    class Bare:
        def __init__(self, config):
            self.model = Backbone(config)
            self.lm_head = object()

        def forward(self, x):
            hidden_states = self.model(x)
            {forward}
            return self.logits_processor(x, hidden_states{aux})
    {hook}
    EntryClass = [Bare]
"""
HOOK_DEF = """
        def set_eagle3_layers_to_capture(self, layer_ids=None):
            self.capture_aux_hidden_states = True
            self.model.layers_to_capture = layer_ids
"""
ROW = {"old_file": "models/m.py", "file": "models/m.py", "cls": "Bare", "backbone": "model",
       "member": "set_eagle3_layers_to_capture", "fix_kind": "synthesize", "fix_from": "models/l.py:L"}


def plumbing_trees(tmp_path, before: dict, after: dict):
    def files(parts):
        return {"models/backbone.py": PLUMBED_BACKBONE.format(init=parts.get("init", "pass"),
                                                              forward=parts.get("backbone", "pass")),
                "models/m.py": PLUMBED_CLASS.format(forward=parts.get("forward", "pass"), aux=parts.get("aux", ""),
                                                    hook=parts.get("hook", ""))}
    old, new = tree(tmp_path / "R", files(before)), tree(tmp_path / "R1", files(after))
    return history.SourceTree(old), history.SourceTree(new)


@pytest.mark.parametrize("after, added", [
    ({"hook": HOOK_DEF}, False),  # the hook alone: upstream wrote no plumbing
    ({"hook": HOOK_DEF, "backbone": "aux_hidden_states = []"}, True),
    ({"hook": HOOK_DEF, "aux": ", aux_hidden_states"}, True),
])
def test_upstream_plumbing_is_a_forward_that_carries_aux_states_in_r1_only(tmp_path, after, added):
    old, new = plumbing_trees(tmp_path, {}, after)
    got = history.upstream_plumbing(old, new, ROW)
    assert got["added"] is added and got["named_by_blocker"] is None
    assert [(f["of"], f["old"], f["new"]) for f in got["forwards"]] == [
        ("class", "models/m.py:Bare.forward", "models/m.py:Bare.forward"),
        ("backbone", "models/backbone.py:Backbone.forward", "models/backbone.py:Backbone.forward")]
    # a forward that already carried them in R is no plumbing upstream added
    same, _ = plumbing_trees(tmp_path / "again", after, after)
    assert history.upstream_plumbing(same, new, ROW)["added"] is False
    blocker = {"names": "models/backbone.py:Backbone.forward", "reads_it_in_new": True}
    assert history.upstream_plumbing(old, new, ROW, blocker)["added"] is True
    assert history.upstream_plumbing(old, new, {**ROW, "cls": "Gone"})["added"] is None


PIECES = [
    {"piece": "selector-default", "file": "models/backbone.py", "class": "Backbone", "method": "__init__", "line": 4},
    {"piece": "aux-init", "file": "models/backbone.py", "class": "Backbone", "method": "forward", "line": 8},
    {"piece": "unpack", "file": "models/m.py", "class": "Bare", "method": "forward", "line": 11},
    {"piece": "logits-aux", "file": "models/m.py", "class": "Bare", "method": "forward", "line": 12},
]


def test_written_plumbing_is_read_from_the_fix_or_from_the_base_it_is_learned_in():
    report = {"schema": 2, "models": [
        {"file": "models/m.py", "class": "Bare", "missing": [
            {"name": "set_eagle3_layers_to_capture", "gap": "member",
             "fix": {"kind": "synthesize", "from": "models/l.py:L", "plumbing": PIECES}}]},
        {"file": "models/sub.py", "class": "Sub", "missing": [
            {"name": "set_eagle3_layers_to_capture", "gap": "member",
             "fix": {"kind": "inherit", "from": "models/m.py:Bare"}}]},
        {"file": "models/alone.py", "class": "Alone", "missing": [
            {"name": "set_eagle3_layers_to_capture", "gap": "member",
             "fix": {"kind": "synthesize", "from": "models/l.py:L"}}]},
    ]}
    assert history.written_plumbing(ROW, report) == {"in": "models/m.py:Bare", "pieces": PIECES}
    sub = {**ROW, "old_file": "models/sub.py", "cls": "Sub", "fix_kind": "inherit", "fix_from": "models/m.py:Bare"}
    assert history.written_plumbing(sub, report) == {"in": "models/m.py:Bare", "pieces": PIECES}
    assert history.written_plumbing({**ROW, "old_file": "models/alone.py", "cls": "Alone"}, report) is None


def test_each_written_piece_is_matched_in_the_method_of_r1(tmp_path):
    _, new = plumbing_trees(tmp_path, {}, {"hook": HOOK_DEF, "backbone": "aux_hidden_states = []",
                                           "forward": "aux_hidden_states = None", "aux": ", aux_hidden_states"})
    got = history.pieces_as_upstream(new, PIECES, {})
    assert [(m.piece, m.at, m.alike) for m in got] == [
        ("selector-default", "models/backbone.py:Backbone.__init__", False),  # upstream set no default there
        ("aux-init", "models/backbone.py:Backbone.forward", True),
        ("unpack", "models/m.py:Bare.forward", False),  # `aux_hidden_states = None` is no unpack
        ("logits-aux", "models/m.py:Bare.forward", True),
    ]
    moved = history.pieces_as_upstream(new, [{**PIECES[3], "file": "models/old_name.py"}], {})
    assert [(m.at, m.alike) for m in moved] == [("models/m.py:Bare.forward", True)]  # found by class name
    assert [(m.at, m.alike) for m in history.pieces_as_upstream(new, [{**PIECES[3], "class": "Gone"}], {})] == [(None, None)]


def test_an_init_default_counts_in_any_init_the_class_is_built_through(tmp_path):
    site = tree(tmp_path / "T", {"models/b.py": """
        class Base:
            def __init__(self):
                self.layers_to_capture = []

        class Backbone(Base):
            def __init__(self):
                super().__init__()
    """})
    piece = {"piece": "selector-default", "file": "models/b.py", "class": "Backbone", "method": "__init__", "line": 7}
    (got,) = history.pieces_as_upstream(history.SourceTree(site), [piece], {})
    assert (got.at, got.alike) == ("models/b.py:Base.__init__", True)


def test_plumbing_behaviour_puts_upstream_and_apply_side_by_side(tmp_path):
    old, new = plumbing_trees(tmp_path, {}, {"hook": HOOK_DEF, "backbone": "aux_hidden_states = []",
                                             "aux": ", aux_hidden_states"})
    report = {"schema": 2, "models": [{"file": "models/m.py", "class": "Bare", "missing": [
        {"name": "set_eagle3_layers_to_capture", "gap": "member",
         "fix": {"kind": "synthesize", "from": "models/l.py:L", "plumbing": [PIECES[1], PIECES[3]]}}]}]}
    got = history.plumbing_behaviour(ROW, report, old, new)
    assert got["upstream_plumbing"]["added"] is True
    assert got["written_plumbing"]["alike"] is True
    assert [m["alike"] for m in got["written_plumbing"]["as_upstream"]] == [True, True]
    report["models"][0]["missing"][0]["fix"]["plumbing"] = PIECES
    assert history.plumbing_behaviour(ROW, report, old, new)["written_plumbing"]["alike"] is False


def test_broken_plumbing_lists_target_classes_with_a_plumbing_gap():
    report = {"schema": 2, "models": [
        {"file": "models/a.py", "class": "A", "role": "target", "missing": [
            {"name": "set_eagle3_layers_to_capture", "gap": "plumbing", "plumbing": [{"piece": "capture"}]}]},
        {"file": "models/b.py", "class": "B", "role": "target", "missing": [
            {"name": "get_embed_and_head", "gap": "member"}]},
        {"file": "models/c.py", "class": "C", "role": "draft", "missing": [
            {"name": "set_eagle3_layers_to_capture", "gap": "plumbing"}]},
        {"file": "models/d.py", "class": "D", "role": "target", "missing": []},
    ]}
    assert history.broken_plumbing(report) == ["models/a.py:A"]
    assert history.broken_plumbing({"models": [{"file": "f", "class": "E", "missing": [{"name": "x"}]}]}) == []


def test_plumbing_counts_and_the_rows_by_kind():
    def hook(added, pieces=None, runs=None):
        written = None if pieces is None else {"pieces": pieces, "alike": all(pieces), "runs": runs}
        return {"synthesized": False, "behaves_as_upstream": None, "plumbing": None,
                "upstream_plumbing": {"added": added}, "written_plumbing": written}

    capture = {"member": "set_eagle3_layers_to_capture", "shape": "body", "written": False}
    fixes = [
        {**capture, "hook": hook(True, [True, True], {"runs_as_upstream": False})},  # its pieces read alike, it runs otherwise
        {**capture, "hook": hook(True, [True, False], {"runs_as_upstream": True})},
        {**capture, "hook": hook(True)},
        {**capture, "hook": hook(False, [True])},
        {**capture, "hook": hook(True, [True]), "member": "get_embed_and_head"},  # not the capture hook
        {"member": "get_embed_and_head", "shape": "delegation", "written": True, "as_upstream": True},
    ]
    assert history.plumbing_counts(fixes) == {
        "plumbing_hooks": 4, "plumbing_upstream": 3, "plumbing_written": 2, "plumbing_alike": 1,
        "plumbing_runs_as_upstream": 1, "plumbing_written_without_upstream": 1}
    rows = {r["kind"]: r for r in history.kind_rows([{"fixes": fixes}])}
    # "as upstream" for plumbing is what ran alike on the stubs; the pieces read alike beside it
    assert rows["plumbing"] == {"kind": "plumbing", "upstream": 3, "written": 2, "as_upstream": 1, "pieces_alike": 1}
    assert rows["delegation"] == {"kind": "delegation", "upstream": 1, "written": 1, "as_upstream": 1}
    assert rows["learned body"]["upstream"] == 5


def test_algorithms_are_read_from_either_report_and_an_old_report_means_eagle3():
    new = {"protocol": [{"name": "set_dflash_layers_to_capture", "algorithms": ["DFLASH"]},
                        {"name": "get_embed_and_head", "algorithms": ["EAGLE3", "EAGLE"]}]}
    old = {"protocol": [{"name": "get_embed_and_head"}, {"name": "set_embed"}]}  # before the field existed
    assert history.merged_algorithms(new, old) == {
        "set_dflash_layers_to_capture": ["DFLASH"], "get_embed_and_head": ["EAGLE3", "EAGLE"], "set_embed": ["EAGLE3"]}


def test_the_rows_by_algorithm_count_a_shared_member_for_each():
    def fix(member, algorithms, written, shape="delegation", as_upstream=False):
        return {"member": member, "algorithms": algorithms, "reported": True, "written": written,
                "shape": shape, "as_upstream": as_upstream}

    pairs = [
        {"new": "0.5.10", "fixes": [fix("get_embed_and_head", ["EAGLE3", "EAGLE"], True, as_upstream=True)]},
        {"new": "0.5.16", "fixes": [fix("set_dflash_layers_to_capture", ["DFLASH"], False, "body"),
                                    fix("set_dflash_layers_to_capture", ["DFLASH"], True, as_upstream=True)]},
    ]
    rows = {r["algorithm"]: r for r in history.algorithm_rows(pairs)}
    assert list(rows) == ["EAGLE3", "EAGLE", "DFLASH"]
    assert rows["DFLASH"] == {
        "algorithm": "DFLASH", "first_fixed_in": "0.5.16", "fixes": 2, "reported": 2, "written": 1,
        "delegations": 1, "delegations_as_upstream": 1, "hook_bodies": 0, "hook_synthesized": 0, "hook_behaves_as_upstream": 0}
    assert rows["EAGLE"]["fixes"] == rows["EAGLE3"]["fixes"] == 1 and rows["EAGLE"]["first_fixed_in"] == "0.5.10"
    table = "\n".join(history.algorithms_markdown({"algorithms": list(rows.values())}))
    assert "| DFLASH | 2 (0.5.16) | 2 | 1 | 1 of 1 | 0 of 0, 0 alike |" in table


def test_every_algorithms_capture_hook_is_called_as_eagle3s_and_compared():
    """DFlash's hook learned with the reference's `+ 1` behaves as upstream's; one without it does not."""
    upstream = (
        "def set_dflash_layers_to_capture(self, layer_ids):\n"
        "    if layer_ids is None:\n        raise ValueError('DFLASH requires explicit layer_ids')\n"
        "    self.capture_aux_hidden_states = True\n    self.model.layers_to_capture = [val + 1 for val in layer_ids]\n"
    )
    unshifted = upstream.replace("[val + 1 for val in layer_ids]", "list(layer_ids)")
    assert history.calls_for("set_dspark_layers_to_capture") == history.calls_for("set_eagle3_layers_to_capture")
    assert history.calls_for("load_weights") is None
    assert history.compare_bodies(upstream, upstream, "set_dflash_layers_to_capture")["behaves_as_upstream"] is True
    assert history.compare_bodies(unshifted, upstream, "set_dflash_layers_to_capture")["behaves_as_upstream"] is False
