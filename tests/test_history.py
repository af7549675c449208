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
        "fix_to": None}
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
