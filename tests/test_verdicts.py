"""Verdicts by role: which class plays which part, what each part requires, and a gate with a baseline.

Stage-level tables first (roles, call shapes), then the CLI on copies of the bundled fixture
tree, each case a small edit of the tree that mirrors a shape seen in SGLang's releases.
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
from helpers import invoke

from eaglepatch.analyze.context import RunContext
from eaglepatch.analyze.plan import call_misfit
from eaglepatch.analyze.roles import RoleBook, learn_roles
from eaglepatch.engines import locate_tree
from eaglepatch.records import CallShape, ClassInfo

REPO_ROOT = Path(__file__).resolve().parents[1]
CHECKOUT = REPO_ROOT / "fixtures" / "checkout"
SRT = Path("python", "sglang", "srt")
KIMI_CLASS = "KimiK25ForConditionalGeneration"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    target = tmp_path / "tree"
    shutil.copytree(CHECKOUT, target)
    return target


def check_json(root: Path, *args) -> tuple[int, dict]:
    result = invoke("check", root, "--format", "json", *args)
    assert result.exit_code in (0, 1), result.stderr
    return result.exit_code, json.loads(result.stdout)


def model(data: dict, cls: str) -> dict:
    (found,) = [m for m in data["models"] if m["class"] == cls]
    return found


def names(entries) -> set[str]:
    return {e["name"] for e in entries}


# --------------------------------------------------------------------------- roles, as a table

CONFIG = '''\
class ModelConfig:
    def _config_draft_model(self):
        is_draft_model = self.is_draft_model
        if is_draft_model and self.hf_config.architectures[0] == "TinyForCausalLM":
            self.hf_config.architectures[0] = "TinyDrafter"
        if self.hf_config.architectures[0] == "PlainForCausalLM":
            self.hf_config.architectures[0] = "PlainRenamed"


def is_generation_model(model_architectures, is_embedding=False):
    if (
        "TinyScorer" in model_architectures
        or "TinyEncoder" in model_architectures
    ):
        return False
    else:
        return not is_embedding
'''


def _cls(name: str, bases=(), file: str = "models/x.py") -> ClassInfo:
    return ClassInfo(name=name, file=file, line=1, members={}, bases=list(bases), external_bases=[])


@pytest.fixture
def book(root: Path) -> RoleBook:
    (root / SRT / "configs" / "model_config.py").write_text(CONFIG, encoding="utf-8")
    return learn_roles(RunContext.fresh(locate_tree(root)))


ROLE_CASES = [
    # (class, bases, file, role, words the reason must contain)
    ("TinyDrafter", (), "models/tiny.py", "draft", "configs/model_config.py:5"),
    ("TinyDrafterV2", ("TinyDrafter",), "models/tiny.py", "draft", "through its base TinyDrafter"),
    ("PlainRenamed", (), "models/plain.py", "target", "generation model"),  # mapped outside a draft branch
    ("TinyScorer", (), "models/tiny.py", "other", "is_generation_model"),
    ("TinyEncoder", (), "models/tiny.py", "other", "configs/model_config.py:13"),
    ("FooForCausalLMEagle3", (), "models/foo.py", "draft", "named as a draft"),
    ("BarForCausalLMNextN", (), "models/bar.py", "draft", "named as a draft"),
    ("BazMTP", (), "models/baz.py", "draft", "named as a draft"),
    ("FooForSequenceClassification", (), "models/foo.py", "other", "non-generation"),
    ("QuxHead", (), "models/qux_eagle.py", "draft", "draft-model module"),
    ("KimiForConditionalGeneration", ("KimiEagleMixin",), "models/kimi.py", "target", "generation model"),
    ("LlamaForCausalLM", (), "models/llama.py", "target", "generation model"),
    # a vision or audio encoder is no target even where its module lists it in EntryClass (pixtral.py)
    ("PixtralVisionModel", ("PixtralHFVisionModel",), "models/pixtral.py", "other", "vision or audio encoder"),
    ("TowerLike", ("SiglipVisionTransformer",), "models/t.py", "other", "vision or audio encoder"),  # through its base
    ("WhisperEncoder", (), "models/whisper.py", "other", "vision or audio encoder"),
    ("Qwen2VLForConditionalGeneration", ("VisionMixin",), "models/qwen2_vl.py", "target", "generation model"),
]


@pytest.mark.parametrize("name, bases, file, role, reason", ROLE_CASES, ids=[c[0] for c in ROLE_CASES])
def test_role_of_class(book: RoleBook, name, bases, file, role, reason):
    got, why = book.role_of(_cls(name, bases, file))
    assert got == role, why
    assert reason in why


def test_an_encoder_named_class_that_makes_logits_is_a_target(book: RoleBook):
    cls = ClassInfo(name="FooVisionModel", file="models/foo.py", line=1, members={"lm_head": None}, bases=[], external_bases=[])
    assert book.role_of(cls)[0] == "target"


def test_an_encoder_another_class_holds_is_named_with_where(root: Path):
    from eaglepatch.read.source_cache import SourceCache

    tree = locate_tree(root)
    (tree.models / "vlm.py").write_text(
        "class Vlm:\n    def __init__(self, config):\n        self.vision_tower = towers.ToyVisionModel(config)\n", encoding="utf-8"
    )
    got, why = learn_roles(RunContext(tree, SourceCache(tree.srt))).role_of(_cls("ToyVisionModel", (), "models/toy.py"))
    assert got == "other" and "models/vlm.py:3" in why


def test_roles_learned_from_a_real_config_shape_not_a_list(book: RoleBook):
    assert set(book.draft) == {"TinyDrafter"}
    assert set(book.other) == {"TinyScorer", "TinyEncoder"}


# --------------------------------------------------------------------------- call shapes, as a table


def _params(header: str) -> ast.arguments:
    node = ast.parse(f"def {header}:\n    pass\n").body[0]
    assert isinstance(node, ast.FunctionDef)
    return node.args


SHAPE_CASES = [
    # (signature, call shape, None when the call binds, else words of the reason)
    ("f(self, layer_ids=None)", CallShape(0), None),
    ("f(self, layer_ids=None)", CallShape(1), None),
    ("f(self, layer_ids=None)", CallShape(0, ("layer_ids",)), None),
    ("f(self, layers_to_capture)", CallShape(0), "layers_to_capture has no default"),
    ("f(self, layers_to_capture)", CallShape(1), None),
    ("f(self)", CallShape(1), "takes 0 positional"),
    ("f(self, *args)", CallShape(3), None),
    ("f(self, a, /, b=1)", CallShape(0, ("a",)), "no parameter a"),
    ("f(self, a, /, b=1)", CallShape(1, ("b",)), None),
    ("f(self, a, b=1)", CallShape(1, ("a",)), "a given twice"),
    ("f(self, *, key)", CallShape(0), "key has no default"),
    ("f(self, *, key)", CallShape(0, ("key",)), None),
    ("f(self, **kwargs)", CallShape(0, ("anything",)), None),
    ("f(self, embed, head)", CallShape(0, (), star=True), None),  # *args at the call: cannot tell
    ("f(self, embed, head)", CallShape(2), None),
]


@pytest.mark.parametrize("header, shape, expected", SHAPE_CASES, ids=[f"{h}|{s.describe()}" for h, s, _ in SHAPE_CASES])
def test_call_misfit(header, shape, expected):
    why = call_misfit(_params(header), shape)
    if expected is None:
        assert why is None
    else:
        assert why is not None and expected in why, why


def test_call_misfit_of_a_static_method_counts_every_parameter():
    assert call_misfit(_params("f(layer_ids=None)"), CallShape(1), is_method=False) is None
    assert call_misfit(_params("f()"), CallShape(1), is_method=False) is not None


# --------------------------------------------------------------------------- roles in the report

DRAFT_MODULE = '''\
"""A draft head the configuration maps to (fixture)."""

from torch import nn

from sglang.srt.models.llama import LlamaModel


class TinyDrafter(nn.Module):
    def __init__(self, config, quant_config=None):
        super().__init__()
        self.model = LlamaModel(config)

    def set_embed_and_head(self, embed, head):
        self.model.embed_tokens.weight = embed


EntryClass = [TinyDrafter]
'''

REWARD_MODULE = '''\
"""A reward model (fixture): never served for generation."""

from torch import nn

from sglang.srt.models.llama import LlamaModel


class TinyScorer(nn.Module):
    def __init__(self, config, quant_config=None):
        super().__init__()
        self.model = LlamaModel(config)


EntryClass = [TinyScorer]
'''


@pytest.fixture
def with_roles(root: Path) -> Path:
    srt = root / SRT
    (srt / "configs" / "model_config.py").write_text(CONFIG, encoding="utf-8")
    (srt / "models" / "tiny_draft.py").write_text(DRAFT_MODULE, encoding="utf-8")
    (srt / "models" / "tiny_scorer.py").write_text(REWARD_MODULE, encoding="utf-8")
    return root


def test_draft_class_is_held_to_draft_members_only(with_roles: Path):
    code, data = check_json(with_roles, "--model", "tiny_draft")
    assert code == 1
    drafter = model(data, "TinyDrafter")
    assert drafter["role"] == "draft"
    assert "configs/model_config.py" in drafter["role_reason"]
    protocol = {p["name"]: p for p in data["protocol"]}
    target_only = {n for n, p in protocol.items() if set(p["roles"]) == {"target"}}
    assert target_only and not target_only & names(drafter["missing"])  # get_embed_and_head is not its concern
    assert names(drafter["forwarded"]) == {"set_embed_and_head"}
    # the fixture's worker calls set_embed unguarded on the draft model: required
    assert "set_embed" in names(drafter["missing"])
    assert all(m["required"] for m in drafter["missing"])


def test_other_class_has_no_requirements(with_roles: Path):
    code, data = check_json(with_roles, "--model", "tiny_scorer")
    assert code == 0
    scorer = model(data, "TinyScorer")
    assert (scorer["role"], scorer["status"], scorer["missing"]) == ("other", "compliant", [])
    assert "is_generation_model" in scorer["reason"]


def test_all_lists_every_entry_class_with_a_role(with_roles: Path):
    _, data = check_json(with_roles, "--all")
    listed = {(m["file"], m["class"]): m["role"] for m in data["models"]}
    assert listed[("models/tiny_draft.py", "TinyDrafter")] == "draft"
    assert listed[("models/tiny_scorer.py", "TinyScorer")] == "other"
    assert listed[("models/llama_eagle3.py", "LlamaForCausalLMEagle3")] == "draft"
    assert listed[("models/kimi_k25.py", KIMI_CLASS)] == "target"
    # classes that hold no other model are listed too, not only wrappers
    assert ("models/llama.py", "LlamaForCausalLM") in listed
    assert data["summary"]["by_role"]["other"] == {"compliant": 1}


# --------------------------------------------------------------------------- call shapes decide the fix


def test_inner_member_with_another_shape_is_not_delegated(root: Path):
    deepseek = root / SRT / "models" / "deepseek_v2.py"
    text = deepseek.read_text(encoding="utf-8")
    old = "def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None):"
    assert text.count(old) == 1
    deepseek.write_text(text.replace(old, "def set_eagle3_layers_to_capture(self, layers_to_capture: List[int]):"), encoding="utf-8")
    code, data = check_json(root)
    assert code == 1
    kimi = model(data, KIMI_CLASS)
    entry = next(m for m in kimi["missing"] if m["name"] == "set_eagle3_layers_to_capture")
    assert entry["fix"] is None and entry["required"] is True
    # the fixture's cuda_graph_runner calls it with no argument
    assert "cannot take the call at model_executor/cuda_graph_runner.py:" in entry["blocker"]
    assert "layers_to_capture has no default" in entry["blocker"]
    assert kimi["status"] == "needs_code"
    # and apply does not write it (the other two are still written)
    diff = invoke("diff", root)
    assert diff.exit_code == 1
    assert "def get_embed_and_head" in diff.stdout
    assert "def set_eagle3_layers_to_capture" not in diff.stdout


# --------------------------------------------------------------------------- the gate and its baseline


def test_baseline_accepts_todays_gaps_and_catches_a_new_one(root: Path, tmp_path: Path):
    baseline = tmp_path / "eagle3-baseline.json"
    first = invoke("check", root, "--all")
    assert first.exit_code == 1  # the fixture has required gaps
    wrote = invoke("check", root, "--all", "--write-baseline", baseline)
    assert wrote.exit_code == 0, wrote.stderr
    recorded = json.loads(baseline.read_text(encoding="utf-8"))
    assert recorded["schema"] == 1
    keys = {(e["file"], e["class"], e["member"]) for e in recorded["entries"]}
    assert ("models/kimi_k25.py", KIMI_CLASS, "get_embed_and_head") in keys
    assert ("models/kimi_k25.py", KIMI_CLASS, "set_embed_and_head") not in keys  # a companion never gates
    assert invoke("check", root, "--all", "--baseline", baseline).exit_code == 0

    # a compliant wrapper loses a hook: the gate turns red and names the class
    llava = root / SRT / "models" / "llava_like.py"
    text = llava.read_text(encoding="utf-8")
    start = text.index("    def get_embed_and_head(")
    end = text.index("    def ", start + 1)
    llava.write_text(text[:start] + text[end:], encoding="utf-8")
    red = invoke("check", root, "--all", "--baseline", baseline, "--format", "json")
    assert red.exit_code == 1
    data = json.loads(red.stdout)
    assert data["baseline"]["new"] == [
        {"file": "models/llava_like.py", "class": "LlavaLikeForConditionalGeneration", "member": "get_embed_and_head"}
    ]
    github = invoke("check", root, "--all", "--baseline", baseline, "--format", "github")
    errors = [line for line in github.stdout.splitlines() if line.startswith("::error ")]
    assert len(errors) == 1 and "LlavaLikeForConditionalGeneration" in errors[0]


def test_baseline_reports_stale_entries(root: Path, tmp_path: Path):
    baseline = tmp_path / "baseline.json"
    assert invoke("check", root, "--all", "--write-baseline", baseline).exit_code == 0
    assert invoke("apply", root, "--model", "kimi_k25").exit_code == 0
    result = invoke("check", root, "--all", "--baseline", baseline, "--format", "json")
    assert result.exit_code == 0
    stale = json.loads(result.stdout)["baseline"]["stale"]
    assert {(s["class"], s["member"]) for s in stale} == {
        (KIMI_CLASS, "get_embed_and_head"),
        (KIMI_CLASS, "set_eagle3_layers_to_capture"),
    }
    table = invoke("check", root, "--all", "--baseline", baseline)
    assert f"baseline entry {KIMI_CLASS}.get_embed_and_head" in table.stdout


@pytest.mark.parametrize(
    "content, words",
    [
        ("{not json", "not a readable baseline"),
        ('{"schema": 99, "entries": []}', "not an eaglepatch baseline"),
        ('{"schema": 1, "entries": [{"file": 1}]}', "without file, class and member"),
    ],
    ids=["not-json", "foreign", "bad-entry"],
)
def test_bad_baseline_is_one_line_exit_2(root: Path, tmp_path: Path, content: str, words: str):
    baseline = tmp_path / "baseline.json"
    baseline.write_text(content, encoding="utf-8")
    result = invoke("check", root, "--baseline", baseline)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("eaglepatch: error: ") and str(baseline) in line and words in line


def test_missing_baseline_and_both_flags_are_errors(root: Path, tmp_path: Path):
    missing = invoke("check", root, "--baseline", tmp_path / "nope.json")
    assert missing.exit_code == 2 and "--write-baseline" in missing.stderr
    both = invoke("check", root, "--baseline", tmp_path / "a.json", "--write-baseline", tmp_path / "b.json")
    assert both.exit_code == 2 and len(both.stderr.splitlines()) == 1
    assert not (tmp_path / "b.json").exists()


def test_named_model_that_needs_code_fails_the_gate(root: Path):
    """A user serves the model they name: a required hook nobody can write still fails."""
    result = invoke("check", root, "--model", "qwen_backbone")
    assert result.exit_code == 1
    assert "needs_code" in result.stdout


# --------------------------------------------------------------------------- readable in a CI log


def test_all_summary_never_cuts_member_names_at_120_columns(root: Path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    result = invoke("check", root, "--all")
    assert "…" not in result.stdout
    assert "set_eagle3_layers_to_capture" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 120
    footer = [line for line in result.stdout.splitlines() if "class(es)" in line]
    assert footer and "target:" in footer[-1]


# --------------------------------------------------------------------------- on real releases


@pytest.mark.integration
def test_latest_bare_backbone_model_fails_the_gate_with_a_precise_blocker(sglang_latest: Path):
    result = invoke("check", sglang_latest, "--model", "afmoe", "--format", "json")
    assert result.exit_code == 1, result.stderr
    (afmoe,) = json.loads(result.stdout)["models"]
    assert (afmoe["role"], afmoe["status"]) == ("target", "needs_code")
    missing = {entry["name"]: entry for entry in afmoe["missing"]}
    # the getter is learned from a class of the tree on the same shape (issue "Synthesize") ...
    assert missing["get_embed_and_head"]["fix"]["kind"] == "synthesize"
    # ... the capture hook is not: AfmoeModel's forward collects no aux hidden states
    capture = missing["set_eagle3_layers_to_capture"]
    assert capture["fix"] is None and "bare backbone" in capture["blocker"]
    assert "AfmoeModel (models/afmoe.py:" in capture["blocker"] and "layers_to_capture" in capture["blocker"]


@pytest.mark.integration
def test_latest_baseline_round_trip_then_a_lost_hook_is_caught(checkout_of, tmp_path: Path):
    from sglang_releases import latest_release

    root = checkout_of(latest_release())
    baseline = tmp_path / "baseline.json"
    assert invoke("check", root, "--all", "--write-baseline", baseline).exit_code == 0
    assert invoke("check", root, "--all", "--baseline", baseline).exit_code == 0
    # KimiK25 forwards the hooks by hand since 0.5.10: take one away
    kimi = root / SRT / "models" / "kimi_k25.py"
    text = kimi.read_text(encoding="utf-8")
    start = text.index("    def get_embed_and_head(")
    end = text.index("\n    def ", start + 1) + 1
    kimi.write_text(text[:start] + text[end:], encoding="utf-8")
    red = invoke("check", root, "--all", "--baseline", baseline, "--format", "json")
    assert red.exit_code == 1
    assert json.loads(red.stdout)["baseline"]["new"] == [
        {"file": "models/kimi_k25.py", "class": KIMI_CLASS, "member": "get_embed_and_head"}
    ]


# --------------------------------------------------------------------------- one apply does it all

OMNI_MODULE = '''\
"""A wrapper whose inner model subclasses another wrapper (the Qwen3-Omni shape; fixture)."""

from torch import nn

from sglang.srt.models.kimi_k25 import KimiK25ForConditionalGeneration


class OmniThinkerForConditionalGeneration(KimiK25ForConditionalGeneration):
    pass


class OmniLikeForConditionalGeneration(nn.Module):
    def __init__(self, config, quant_config=None):
        super().__init__()
        self.thinker = OmniThinkerForConditionalGeneration(config, quant_config)


class KimiLiteForConditionalGeneration(KimiK25ForConditionalGeneration):
    pass


EntryClass = [OmniLikeForConditionalGeneration, KimiLiteForConditionalGeneration]
'''


def test_fixes_into_a_base_class_serve_its_subclasses_in_the_same_run(root: Path):
    (root / SRT / "models" / "omni_like.py").write_text(OMNI_MODULE, encoding="utf-8")
    _, data = check_json(root, "--all")
    omni = model(data, "OmniLikeForConditionalGeneration")
    assert omni["status"] == "fixable", omni["reason"]
    assert {m["fix"]["to"] for m in omni["missing"]} == {"thinker"}
    assert names(omni["missing"]) == names(model(data, KIMI_CLASS)["missing"])
    # a subclass of the fixed wrapper gets the members from it: nothing is written into the subclass
    lite = model(data, "KimiLiteForConditionalGeneration")
    assert lite["status"] == "fixable"
    assert {m["fix"]["kind"] for m in lite["missing"]} == {"inherit"}
    assert {m["fix"]["from"] for m in lite["missing"]} == {f"models/kimi_k25.py:{KIMI_CLASS}"}
    before_lite = (root / SRT / "models" / "omni_like.py").read_text(encoding="utf-8")

    applied = invoke("apply", root, "--all")
    _, after = check_json(root, "--all")
    assert after["summary"]["fixes"] == 0
    assert after["summary"]["missing"] > 0  # the fixture's needs_code classes: apply says so, exit 1
    assert applied.exit_code == 1 and f"{after['summary']['missing']} required member(s) still missing" in applied.stdout
    assert model(after, "OmniLikeForConditionalGeneration")["status"] == "compliant"
    assert model(after, "KimiLiteForConditionalGeneration")["status"] == "compliant"
    written = (root / SRT / "models" / "omni_like.py").read_text(encoding="utf-8")
    assert "class KimiLiteForConditionalGeneration(KimiK25ForConditionalGeneration):\n    pass\n" in written
    assert written.count("def ") == before_lite.count("def ") + 3  # the three forwards, all into OmniLike
    again = invoke("apply", root, "--all")
    assert again.exit_code == 1 and "Nothing to do" not in again.stdout
    assert f"Nothing eaglepatch can write; {after['summary']['missing']} required member(s) missing" in again.stdout
