"""The checker the release test relies on (tests/stub_imports.py, tests/release_imports.py) catches what it
is there to catch, on a small tree of our own: a written member that drops the inner's default, or does
not hand back what the inner returned, or a setter that does not reach the inner model, is reported;
a faithful one is "ok", with the inner's defaults compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from release_imports import added_members, changed_files

HERE = Path(__file__).resolve().parent

INNER = '''\
import torch
from torch import nn

SCALE = object()


class Inner(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hot_token_id = None

    def set_eagle3_layers_to_capture(self, layer_ids=None, scale=SCALE, *, strict=False):
        return (layer_ids, scale, strict)

    def set_embed_and_head(self, embed, head):
        return (embed, head)
'''

WRAPPER = '''\
from torch import nn

from sglang.srt.models.inner import SCALE, Inner


def _forward(self, name, *args, **kwargs):
    return getattr(self.language_model, name)(*args, **kwargs)


class Faithful(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.language_model = Inner(config)

    def set_eagle3_layers_to_capture(self, layer_ids=None, scale=SCALE, *, strict=False):
        inner = self.language_model
        return inner.set_eagle3_layers_to_capture(layer_ids, scale, strict=strict)

    def set_embed_and_head(self, embed, head):
        inner = self.language_model
        return inner.set_embed_and_head(embed, head)

    @property
    def hot_token_id(self):
        return self.language_model.hot_token_id

    @hot_token_id.setter
    def hot_token_id(self, value):
        self.language_model.hot_token_id = value


class OwnDefault(Faithful):
    def __init__(self, config):
        super().__init__(config)
        self.language_model = Inner(config)

    def set_eagle3_layers_to_capture(self, layer_ids=None, scale=0.5, *, strict=False):
        return self.language_model.set_eagle3_layers_to_capture(layer_ids, scale, strict=strict)


class Swallows(Faithful):
    def set_embed_and_head(self, embed, head):
        self.language_model.set_embed_and_head(embed, head)


class SwapsArguments(Faithful):
    def set_embed_and_head(self, embed, head):
        return self.language_model.set_embed_and_head(head, embed)


class KeepsTheValue(Faithful):
    @property
    def hot_token_id(self):
        return self.language_model.hot_token_id

    @hot_token_id.setter
    def hot_token_id(self, value):
        self._kept = value
'''


def _tree(root: Path, wrapper: str = WRAPPER) -> Path:
    models = root / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    for folder in (root / "sglang", root / "sglang" / "srt", models):
        (folder / "__init__.py").write_text("", encoding="utf-8")
    (models / "inner.py").write_text(INNER, encoding="utf-8")
    (models / "wrapper.py").write_text(wrapper, encoding="utf-8")
    (models / "broken.py").write_text("import sglang.srt.models.inner\nraise RuntimeError('not today')\n", encoding="utf-8")
    return root


def _check(site: Path, spec: dict) -> dict:
    spec_file = site / "spec.json"
    spec_file.write_text(json.dumps(spec), encoding="utf-8")
    done = subprocess.run([sys.executable, "-I", "-B", str(HERE / "stub_imports.py"), str(site), "--check", str(spec_file)],
                          capture_output=True, text=True, env=dict(os.environ), timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_forwarding_on_a_stub_instance_tells_faithful_members_from_wrong_ones(tmp_path):
    site = _tree(tmp_path)
    members = ["set_eagle3_layers_to_capture", "set_embed_and_head", "hot_token_id"]
    report = _check(site, {
        "sglang.srt.models.wrapper": {
            "Faithful": members,
            "OwnDefault": ["set_eagle3_layers_to_capture"],
            "Swallows": ["set_embed_and_head"],
            "SwapsArguments": ["set_embed_and_head"],
            "KeepsTheValue": ["hot_token_id"],
        },
        "sglang.srt.models.broken": {},
    })
    wrapper = report["sglang.srt.models.wrapper"]
    assert wrapper["import"] == "ok"  # torch is a stub, and nn.Module a class to subclass
    found = wrapper["members"]
    for member in members:
        assert found[f"Faithful.{member}"]["forward"] == "ok", found[f"Faithful.{member}"]
    assert found["Faithful.set_eagle3_layers_to_capture"]["defaults"] == "compared with sglang.srt.models.inner.Inner"
    assert found["Faithful.hot_token_id"]["kind"] == "property"
    assert "scale" in found["OwnDefault.set_eagle3_layers_to_capture"]["forward"]
    assert "not its default" in found["OwnDefault.set_eagle3_layers_to_capture"]["forward"]
    assert found["Swallows.set_embed_and_head"]["forward"] != "ok"
    assert "embed" in found["SwapsArguments.set_embed_and_head"]["forward"]
    assert "setter" in found["KeepsTheValue.hot_token_id"]["forward"]
    assert report["sglang.srt.models.broken"]["import"] == "RuntimeError: not today"


def test_a_member_the_class_does_not_have_is_not_present(tmp_path):
    site = _tree(tmp_path)
    report = _check(site, {"sglang.srt.models.wrapper": {"Faithful": ["get_embed_and_head"], "Missing": ["x"]}})
    found = report["sglang.srt.models.wrapper"]["members"]
    assert found["Faithful.get_embed_and_head"]["present"] is False  # a stub base answers any name: not counted
    assert found["Missing.x"]["present"] is False


def test_added_members_and_changed_files_are_read_off_the_two_copies(tmp_path):
    before = textwrap.dedent('''\
        class A:
            x = 1

            def f(self):
                pass


        class B:
            pass
        ''').encode()
    after = before.replace(b"class B:\n    pass\n", b"class B:\n    if True:\n        y = 2\n    def g(self):\n        z = 3\n")
    after = after.replace(b"    x = 1\n", b"    x = 1\n    w: int = 0\n")
    assert added_members(before, after) == {"A": ["w"], "B": ["g", "y"]}
    for side, data in (("pristine", before), ("patched", after)):
        (tmp_path / side / "pkg").mkdir(parents=True)
        (tmp_path / side / "pkg" / "m.py").write_bytes(data)
        (tmp_path / side / "pkg" / "same.py").write_bytes(b"pass\n")
    (tmp_path / "pristine" / "pkg" / "gone.py").write_bytes(b"")
    assert changed_files(tmp_path / "pristine", tmp_path / "patched") == ["pkg/m.py", "pkg/gone.py"]


LEARNED_MODULE = '''\
from typing import List, Optional


class Learned:
    # eaglepatch: learned from models/ref.py:Ref (digest 000000000000)
    def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None):
        if not self.pp_group.is_last_rank:
            return
        self.capture_aux_hidden_states = True
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]

    # eaglepatch: learned from models/ref.py:Ref (digest 000000000000)
    def set_embed_and_head(self, embed, head):
        del self.model.embed_tokens.weight
        self.model.embed_tokens.weight = embed
        empty_cache()
'''


def test_a_learned_body_runs_on_a_stand_in_and_a_name_it_lacks_is_caught(tmp_path: Path):
    """A learned hook is not a forward: the check runs it, and a module-level name its file does not bind
    (the import apply should have added) fails it; what it stores is recorded."""
    (tmp_path / "learned_mod.py").write_text(LEARNED_MODULE)
    code = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(HERE)!r}); sys.path.insert(0, {str(tmp_path)!r})
        import stub_imports, learned_mod
        cls = learned_mod.Learned
        print(json.dumps({{m: stub_imports.forwarding(cls, m) for m in ("set_eagle3_layers_to_capture", "set_embed_and_head")}}))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    capture = found["set_eagle3_layers_to_capture"]
    assert capture["forward"] == "ok" and capture["learned_from"] == "models/ref.py:Ref"
    assert ["self.capture_aux_hidden_states", "True"] in capture["writes"]
    assert ["self.model.layers_to_capture", "[2, 16, 29]"] in capture["writes"]
    swap = found["set_embed_and_head"]
    assert swap["forward"].startswith("the learned body (from models/ref.py:Ref) reads a name its module does not bind")
    assert "empty_cache" in swap["forward"]
