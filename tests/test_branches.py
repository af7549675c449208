"""A wrapper whose __init__ builds one of several inner classes, a branch per config."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from typer.testing import CliRunner

from eaglepatch.cli import app

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "checkout"
MODEL = "branchy_wrapper"


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(FIXTURE, root)
    return root


def test_each_branch_class_is_reported_with_what_it_provides(tmp_path):
    root = _copy(tmp_path)
    result = CliRunner().invoke(app, ["check", str(root), "-m", MODEL, "--format", "json"])
    assert result.exit_code == 1, result.output
    model = json.loads(result.stdout)["models"][0]
    assert model["status"] == "fixable"
    assert {(i["attribute"], i["class"]) for i in model["inner"]} == {
        ("language_model", "LlamaForCausalLM"),
        ("language_model", "Qwen2Model"),
    }
    assert all(i["conditional"] for i in model["inner"])
    missing = {m["name"]: m for m in model["missing"]}
    assert set(missing) == {"get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture"}
    for entry in missing.values():
        assert entry["provided_by"] == ["LlamaForCausalLM"]
        assert entry["lacking_in"] == ["Qwen2Model"]
        assert entry["defined_at"].startswith("models/llama.py:")
    table = CliRunner().invoke(app, ["check", str(root), "-m", MODEL])
    assert "provided by LlamaForCausalLM; not by Qwen2Model" in table.stdout


def test_generated_code_is_correct_for_every_branch(tmp_path):
    root = _copy(tmp_path)
    applied = CliRunner().invoke(app, ["apply", str(root), "-m", MODEL])
    assert applied.exit_code == 0, applied.output
    script = textwrap.dedent(
        """
        import sys, types
        from sglang.srt.models.branchy_wrapper import BranchyForConditionalGeneration as W

        text = types.SimpleNamespace(num_hidden_layers=8, vocab_size=16, hidden_size=4)
        full = W(types.SimpleNamespace(text_config=text))
        embed, head = full.get_embed_and_head()
        assert (embed, head) == full.language_model.get_embed_and_head()
        full.set_eagle3_layers_to_capture([1, 2])
        assert full.language_model.model.layers_to_capture == [2, 3]

        backbone = W(types.SimpleNamespace(text_config=text, backbone_only=True))
        for call in (lambda: backbone.get_embed_and_head(), lambda: backbone.set_eagle3_layers_to_capture()):
            try:
                call()
            except AttributeError as exc:
                assert "language_model has no" in str(exc), exc
            else:
                raise SystemExit("the Qwen2Model branch did not raise")
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(root / 'python')!r})\n" + script],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
