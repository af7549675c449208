"""`eaglepatch preflight`: a launch predicted from the tree, the command line and the checkpoints.

The fixture checkpoints (fixtures/checkpoints/) mirror the seed's pair: a Kimi-K2.5 target (a
multimodal config whose `text_config` has 61 layers, hidden 7168, 262144 positions) and its EAGLE-3
draft (`LlamaForCausalLMEagle3`, 131072 positions, a reduced vocabulary with its `d2t` in a
header-only safetensors file).  Each rule is tested both ways; the real releases come last.
"""

from __future__ import annotations

import ast
import json
import shutil
import textwrap
from pathlib import Path

import pytest
from helpers import checkpoint_copy, flat, snapshot
from typer.testing import CliRunner

from eaglepatch.analyze import preflight as rules
from eaglepatch.cli import app
from eaglepatch.read.checkpoint import Checkpoint, Weight, read_header
from eaglepatch.read.launch_line import read_launch
from eaglepatch.read.server_options import Option, Options

REPO = Path(__file__).resolve().parent.parent
CHECKOUT = REPO / "fixtures" / "checkout"
TARGET = REPO / "fixtures" / "checkpoints" / "kimi-k2.5"
DRAFT = REPO / "fixtures" / "checkpoints" / "kimi-k2.5-eagle3"
SWITCH = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
RUNNER = CliRunner()


def launch(*extra: str, target: Path = TARGET, draft: Path | None = DRAFT, algorithm: str = "EAGLE3", env: tuple[str, ...] = ()) -> list[str]:
    words = [*env, "python", "-m", "sglang.launch_server", "--model-path", str(target), "--speculative-algorithm", algorithm]
    if draft is not None:
        words += ["--speculative-draft-model-path", str(draft)]
    return words + ["--tp", "8", *extra]


def preflight(tree: Path, words: list[str], shell: dict[str, str | None] | None = None) -> tuple[int, dict]:
    """The command's exit code and JSON, run from a shell exporting `shell` (the context switch unset
    unless given: the tests do not depend on the environment they run in)."""
    result = RUNNER.invoke(app, ["preflight", "--format", "json", str(tree), "--", *words], env={SWITCH: None, **(shell or {})})
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def by_check(data: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for finding in data["findings"]:
        out.setdefault(finding["check"], []).append(finding)
    return out


# --------------------------------------------------------------------------- the seed's launch, on the fixture tree


def test_the_seeds_launch_fails_on_every_count_at_once():
    code, data = preflight(CHECKOUT, launch())
    found = by_check(data)
    assert code == 1 and data["schema"] == 1 and data["algorithm"] == "EAGLE3"
    assert data["target"] == "models/kimi_k25.py:KimiK25ForConditionalGeneration"
    assert data["draft"] == "models/llama_eagle3.py:LlamaForCausalLMEagle3"
    hooks = sorted(f["message"].split(": ")[1].split(" ")[0] for f in found["target-hooks"])
    assert hooks == ["get_embed_and_head", "set_eagle3_layers_to_capture"]
    assert all(f["severity"] == "fail" and f["when"] == "after-target-load" and f["fix"].startswith("eaglepatch apply --model kimi_k25:") for f in found["target-hooks"])
    (context,) = found["context-length"]
    assert context["severity"] == "fail" and "131072" in context["message"] and "262144" in context["message"]
    assert context["fix"].startswith(f"set {SWITCH}=1") and context["where"] == "configs/model_config.py:12"  # read from the tree
    (shift,) = found["aux-layer-ids"]
    assert shift["severity"] == "info" and "[2, 30, 58]" in shift["message"] and "shifted by one" in shift["message"]
    assert shift["where"] == "models/deepseek_v2.py:123"  # the hook the delegation reaches
    assert {f["check"] for f in data["findings"] if f["severity"] == "fail"} == {"target-hooks", "context-length"}


def test_the_table_names_each_failure_and_nothing_is_written(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(CHECKOUT, tree)
    before = snapshot(tree)
    result = RUNNER.invoke(app, ["preflight", str(tree), "--", *launch()])
    assert result.exit_code == 1
    text = flat(result.stdout)  # the table wraps at the terminal's width
    assert "fail target-hooks (after-target-load): KimiK25ForConditionalGeneration is missing: set_eagle3_layers_to_capture" in text
    assert "3 fail, 1 warn, 3 info" in text
    assert snapshot(tree) == before


def test_after_apply_the_hooks_pass_and_the_context_still_fails(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(CHECKOUT, tree)
    assert RUNNER.invoke(app, ["apply", str(tree), "--model", "kimi_k25"]).exit_code == 0
    code, data = preflight(tree, launch())
    assert code == 1 and "target-hooks" not in by_check(data) and by_check(data)["context-length"][0]["severity"] == "fail"


# --------------------------------------------------------------------------- each rule both ways, through the command


@pytest.mark.parametrize(
    ("env", "shell", "source"),
    [
        ((f"{SWITCH}=1",), {}, "on the line"),
        ((), {SWITCH: "1"}, "from the shell"),  # `export SGLANG_...=1`, then the launch: it inherits it
        ((f"{SWITCH}=true",), {SWITCH: "0"}, "on the line"),  # the line's assignment wins
        (("env", f"{SWITCH}=1"), {}, "on the line"),
    ],
)
def test_the_switch_turns_the_context_failure_into_a_warning(env, shell, source):
    code, data = preflight(CHECKOUT, launch(env=env), shell)
    (context,) = by_check(data)["context-length"]
    assert context["severity"] == "warn" and context["when"] == "first-request" and f"({source})" in context["message"]
    assert "context-length" not in {f["check"] for f in data["findings"] if f["severity"] == "fail"}


def test_env_minus_i_leaves_the_shells_switch_behind():
    _, data = preflight(CHECKOUT, launch(env=("env", "-i")), {SWITCH: "1"})
    assert by_check(data)["context-length"][0]["severity"] == "fail"


def test_a_context_length_the_draft_covers_raises_nothing():
    _, data = preflight(CHECKOUT, launch("--context-length", "131072"))
    assert "context-length" not in by_check(data)
    _, longer = preflight(CHECKOUT, launch("--context-length=200000"))
    assert "200000" in by_check(longer)["context-length"][0]["message"]


@pytest.mark.parametrize(
    ("word", "fires"),
    [
        ("--speculative-draft", "ambiguous option: --speculative-draft could match"),
        ("--speculative-draft-model", None),  # an alias, spelled out
        ("--enable-metric", None),  # a unique prefix: argparse takes it
        ("--no-such-option", "unrecognized argument: --no-such-option"),
    ],
)
def test_options_are_read_as_the_trees_parser_reads_them(word, fires):
    words = launch(draft=None) + [word] + ([str(DRAFT)] if "draft" in word else [])
    _, data = preflight(CHECKOUT, words)
    errors = [f["message"] for f in by_check(data).get("launch-arguments", [])]
    if fires is None:
        assert not errors
    else:
        assert len(errors) == 1 and fires in errors[0]


CHOICES_CASES = [
    # (server_args.py's text around the option, the choices read)
    ('p.add_argument("--b", choices=["x", "y"])', ("x", "y")),
    ('B = ["x", "y"]\np.add_argument("--b", choices=B)', ("x", "y")),
    ('A = ("x",)\nB = A\np.add_argument("--b", choices=B)', ("x",)),  # 0.5.16's draft quantization
    ('from sglang.srt.layers.choices import C\np.add_argument("--b", choices=C)', ("q", "r")),
    ('p.add_argument("--b", choices=[*B, "unquant"])', ("unquant",)),  # the starred part is not read
    ('p.add_argument("--b", choices=sorted(B))', ()),
]


@pytest.mark.parametrize(("text", "expected"), CHOICES_CASES)
def test_an_options_choices_are_read_to_their_literal(tmp_path, text, expected):
    from eaglepatch.read.launch_line import read_options
    from eaglepatch.read.source_cache import SourceCache

    srt = tmp_path / "sglang" / "srt"
    (srt / "layers").mkdir(parents=True)
    (srt / "layers" / "choices.py").write_text('C = ["q", "r"]\n')
    (srt / "server_args.py").write_text("import argparse\np = argparse.ArgumentParser()\n" + text + "\n")
    options = read_options(SourceCache(srt))
    assert options.by_string["--b"].choices == expected


_DEPRECATED = """\
class DeprecatedAction(argparse.Action):
    def __init__(self, option_strings, dest, nargs=0, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

class DeprecatedStoreTrueAction(argparse.Action):
    def __init__(self, option_strings, dest, new_flag=None, nargs=0, const=True, default=False, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, const=const, default=default, **kwargs)

class Fixed(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, **kwargs)

class Passing(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, **kwargs)

class Inherited(DeprecatedAction):
    pass
"""

TAKES_CASES = [
    # (the option's add_argument, how many words argparse takes for it)
    ('p.add_argument("--b", action="store_true")', "none"),
    ('p.add_argument("--b", action=DeprecatedAction)', "none"),  # its __init__'s nargs=0 (0.5.15 on)
    ('p.add_argument("--b", action=DeprecatedStoreTrueAction, new_flag="--c")', "none"),
    ('p.add_argument("--b", action=DeprecatedAction, nargs=None)', "one"),  # the call's nargs wins
    ('p.add_argument("--b", action=Fixed)', "none"),  # the constant its __init__ hands up
    ('p.add_argument("--b", action=Passing)', "one"),  # argparse's default
    ('p.add_argument("--b", action=Inherited)', "none"),  # through its base
    ('p.add_argument("--b", action=Moved)', "none"),  # imported from a module of the tree
    ('p.add_argument("--b", action=argparse.BooleanOptionalAction)', "none"),
    ('p.add_argument("--b", action=LoRAPathAction, nargs="*")', "many"),
    ('p.add_argument("--b", action=Unknown)', "one"),  # not found: read as taking a value
    ('p.add_argument("--b", action=UnknownStoreTrueAction)', "none"),  # ... unless its name says store_true
]


@pytest.mark.parametrize(("text", "takes"), TAKES_CASES)
def test_an_options_action_class_says_how_many_words_it_takes(tmp_path, text, takes):
    from eaglepatch.read.launch_line import read_options
    from eaglepatch.read.source_cache import SourceCache

    srt = tmp_path / "sglang" / "srt"
    (srt / "layers").mkdir(parents=True)
    (srt / "layers" / "actions.py").write_text("import argparse\n\n" + _DEPRECATED.replace("class Fixed", "class Moved"))
    head = "import argparse\nfrom sglang.srt.layers.actions import Moved\n" + _DEPRECATED
    (srt / "server_args.py").write_text(head + "p = argparse.ArgumentParser()\n" + text + "\n")
    assert read_options(SourceCache(srt)).by_string["--b"].takes == takes


def test_eagle3_without_a_draft_path_fails_after_the_target_loads():
    _, data = preflight(CHECKOUT, launch(draft=None))
    (missing,) = by_check(data)["draft-path-missing"]
    assert missing["when"] == "after-target-load" and missing["where"].startswith("server_args.py:")
    _, with_draft = preflight(CHECKOUT, launch())
    assert "draft-path-missing" not in by_check(with_draft)


def test_eagle_with_an_eagle3_draft_is_a_silent_warning():
    _, data = preflight(CHECKOUT, launch(algorithm="EAGLE"))
    (mismatch,) = by_check(data)["algorithm-draft-mismatch"]
    assert mismatch["severity"] == "warn" and mismatch["when"] == "silent" and "EAGLE3" in mismatch["fix"]
    assert "algorithm-draft-mismatch" not in by_check(preflight(CHECKOUT, launch())[1])


def test_an_unregistered_draft_architecture_fails(tmp_path):
    draft = tmp_path / "draft"
    shutil.copytree(DRAFT, draft)
    config = json.loads((draft / "config.json").read_text())
    config["architectures"] = ["KimiK25Eagle3MLA"]
    (draft / "config.json").write_text(json.dumps(config))
    _, data = preflight(CHECKOUT, launch(draft=draft))
    (arch,) = by_check(data)["draft-architecture"]
    assert arch["severity"] == "fail" and "KimiK25Eagle3MLA is not served by this release" in arch["message"]


@pytest.mark.parametrize(
    ("draft_dtype", "extra", "fires"),
    [
        ("float16", (), True),  # a bfloat16 target, a float16 EAGLE head: the draft's matmul fails
        ("float16", ("--dtype", "bfloat16"), False),  # both load in the dtype given
        ("bfloat16", (), False),
        (None, (), True),  # no dtype in its config: float32, cast down to float16
        ("float32", (), True),
    ],
)
def test_a_draft_loaded_in_another_dtype_than_the_target_fails(tmp_path, draft_dtype, extra, fires):
    draft = checkpoint_copy(tmp_path, DRAFT, "draft", torch_dtype=draft_dtype)
    _, data = preflight(CHECKOUT, launch(*extra, draft=draft))
    found = by_check(data).get("dtype", [])
    assert [f["severity"] for f in found] == (["fail"] if fires else [])
    if fires:
        assert found[0]["fix"] == "pass --dtype bfloat16, so both load in the target's dtype"
        assert found[0]["where"].startswith("configs/model_config.py:")  # where the tree resolves it


@pytest.mark.parametrize(
    ("config", "asked", "loaded"),
    [
        ({"torch_dtype": "bfloat16"}, "auto", "bfloat16"),
        ({"dtype": "float16", "torch_dtype": "bfloat16"}, "auto", "float16"),  # transformers' newer key first
        ({}, "auto", "float16"),
        ({"torch_dtype": "float32", "model_type": "gemma2"}, "auto", "bfloat16"),
        ({"torch_dtype": "bfloat16"}, "half", "float16"),
        ({"text_config": {"torch_dtype": "float16"}, "torch_dtype": "bfloat16"}, "auto", "float16"),  # the text config's
    ],
)
def test_the_dtype_a_model_loads_in_is_the_trees_rule(config, asked, loaded):
    assert rules.loaded_dtype(checkpoint(config, ()), asked) == loaded


def test_nextn_runs_as_eagle_as_the_trees_arguments_rename_it():
    """`NEXTN` is renamed to `EAGLE` by the server's argument handling (read from the fixture's
    server_args.py): the EAGLE draft-mismatch rule then applies to it, and EAGLE's hooks are checked."""
    _, data = preflight(CHECKOUT, launch(algorithm="NEXTN"))
    found = by_check(data)
    (alias,) = found["algorithm-alias"]
    assert alias["severity"] == "info" and "runs as EAGLE" in alias["message"] and alias["where"] == "server_args.py:38"
    assert data["algorithm"] == "EAGLE" and "algorithm-draft-mismatch" in found
    assert "algorithm-alias" not in by_check(preflight(CHECKOUT, launch())[1])


@pytest.mark.parametrize(
    ("arch", "algorithm", "severity"),
    [
        ("DeepseekV3ForCausalLM", "EAGLE", "info"),  # its own MTP layers: the server drafts with the target's folder
        ("DeepseekV3ForCausalLM", "EAGLE3", "fail"),  # the same fallback, but the target is no EAGLE-3 head
        ("KimiK25ForConditionalGeneration", "EAGLE", "fail"),  # not in the tree's list: nothing to draft with
    ],
)
def test_a_missing_draft_path_reads_the_trees_self_drafting_list(tmp_path, arch, algorithm, severity):
    target = checkpoint_copy(tmp_path, TARGET, "target", architectures=[arch])
    _, data = preflight(CHECKOUT, launch(target=target, draft=None, algorithm=algorithm))
    (missing,) = by_check(data)["draft-path-missing"]
    assert missing["severity"] == severity
    if arch == "DeepseekV3ForCausalLM":
        assert missing["where"] == "server_args.py:41"  # the `if model_arch in [...]` of the fixture


@pytest.mark.parametrize(
    ("extra", "draft_mla", "severity"),
    [
        (("--attention-backend", "flashmla"), False, "fail"),
        (("--attention-backend", "flashmla", "--speculative-draft-attention-backend", "fa3"), False, None),
        (("--attention-backend", "fa3"), False, None),
        ((), False, "warn"),  # the server picks the target's kernel on the GPU it finds: an MLA one on Hopper and Blackwell
        (("--attention-backend", "flashmla"), True, None),  # an MLA draft runs MLA kernels
    ],
)
def test_an_mla_target_hands_its_attention_kernel_to_the_draft(tmp_path, extra, draft_mla, severity):
    draft = checkpoint_copy(tmp_path, DRAFT, "draft", kv_lora_rank=512 if draft_mla else None)
    _, data = preflight(CHECKOUT, launch(*extra, draft=draft))
    found = by_check(data).get("draft-attention-backend", [])
    assert [f["severity"] for f in found] == ([severity] if severity else [])
    if severity == "fail":
        assert "flashmla is an MLA kernel" in found[0]["message"] and found[0]["fix"].startswith("pass --speculative-draft-attention-backend fa3")
        assert found[0]["where"] == "model_executor/model_runner.py:30"  # where a draft worker takes its own


@pytest.mark.parametrize(
    ("extra", "quantized_draft", "fires"),
    [
        (("--quantization", "fp8"), False, True),
        (("--quantization", "fp8", "--speculative-draft-model-quantization", "unquant"), False, False),
        (("--quantization", "fp8"), True, False),  # the draft's own quantization_config says how it is stored
        ((), False, False),
    ],
)
def test_the_targets_quantization_is_carried_to_the_draft(tmp_path, extra, quantized_draft, fires):
    draft = checkpoint_copy(tmp_path, DRAFT, "draft", quantization_config={"quant_method": "fp8"} if quantized_draft else None)
    _, data = preflight(CHECKOUT, launch(*extra, draft=draft))
    found = by_check(data).get("draft-quantization", [])
    assert bool(found) == fires
    if fires:
        (finding,) = found
        assert finding["severity"] == "warn" and "BF16" in finding["message"] and "inherits --quantization fp8" in finding["message"]
        assert finding["fix"] == "pass --speculative-draft-model-quantization unquant" and finding["where"] == "server_args.py:46"


def test_an_unreadable_model_file_is_named(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(CHECKOUT, tree)
    (tree / "python/sglang/srt/models/broken.py").write_bytes(b"EntryClass = [Broken\xff]\n")
    _, data = preflight(tree, launch())
    (registry,) = by_check(data)["registry"]
    assert registry["severity"] == "warn" and registry["where"] == "models/broken.py"
    assert "registry" not in by_check(preflight(CHECKOUT, launch())[1])


# --------------------------------------------------------------------------- errors: one line, exit 2


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (launch(draft=Path("/no/such/draft")), "the draft '/no/such/draft' is not a local folder"),
        (["python", "-c", "print(1)"], "the launch command starts no SGLang server"),
        ([], "preflight needs the launch command after `--`"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(words, says):
    result = RUNNER.invoke(app, ["preflight", str(CHECKOUT), "--", *words] if words else ["preflight", str(CHECKOUT)])
    assert result.exit_code == 2 and says in result.output and len(result.output.strip().splitlines()) == 1


def test_options_between_the_path_and_the_launch_are_preflights_own():
    """`preflight PATH --format json -- LAUNCH`: the parser stops at PATH, the format is still read;
    an option preflight does not have is exit 2, never silently dropped into the launch."""
    result = RUNNER.invoke(app, ["preflight", str(CHECKOUT), "--format", "json", "--", *launch()])
    assert result.exit_code == 1 and json.loads(result.stdout)["algorithm"] == "EAGLE3"
    result = RUNNER.invoke(app, ["preflight", str(CHECKOUT), "-f=json", "--", *launch()])
    assert json.loads(result.stdout)["schema"] == 1
    bad = RUNNER.invoke(app, ["preflight", str(CHECKOUT), "--tp", "8", "--", *launch()])
    assert bad.exit_code == 2 and "--tp 8 is not an option of preflight" in bad.output


def test_a_config_that_is_not_json_is_exit_2(tmp_path):
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text("{not json")
    result = RUNNER.invoke(app, ["preflight", str(CHECKOUT), "--", *launch(draft=draft)])
    assert result.exit_code == 2 and "the draft's config.json is not readable JSON" in result.output


# --------------------------------------------------------------------------- the rules as functions: (input, expected)


def checkpoint(config: dict, weights: tuple[str, ...] = ()) -> Checkpoint:
    return Checkpoint(Path("/ckpt"), config, {w: Weight(w, "BF16", (1,)) for w in weights})


TARGET_CONFIG = {"text_config": {"num_hidden_layers": 61, "hidden_size": 7168, "max_position_embeddings": 262144}}


@pytest.mark.parametrize(
    ("draft", "weights", "map_given", "fires"),
    [
        ({"vocab_size": 163840, "draft_vocab_size": 32000}, (), False, True),
        ({"vocab_size": 163840, "draft_vocab_size": 32000}, ("d2t", "t2d"), False, False),
        ({"vocab_size": 163840, "draft_vocab_size": 32000}, (), True, False),
        ({"vocab_size": 163840, "draft_vocab_size": 163840}, (), False, False),
        ({"vocab_size": 163840}, (), False, False),
    ],
)
def test_a_reduced_vocabulary_needs_its_mapping(draft, weights, map_given, fires):
    options = Options({"--speculative-token-map": Option(("--speculative-token-map",), "speculative_token_map", "one", "s:1")}, True, "s")
    words = ["python", "-m", "sglang.launch_server"] + (["--speculative-token-map", "/m.pt"] if map_given else [])
    found = list(rules.vocab_rule(checkpoint(draft, weights), read_launch(words, options)))
    assert bool(found) is fires
    if fires:
        assert found[0].when == "silent" and "32000" in found[0].message


@pytest.mark.parametrize(
    ("draft", "fires"),
    [
        ({"hidden_size": 4096}, True),
        ({"hidden_size": 4096, "target_hidden_size": 7168}, False),
        ({"hidden_size": 7168}, False),
    ],
)
def test_the_draft_reads_hidden_states_of_the_targets_size(draft, fires):
    assert bool(list(rules.hidden_size_rule(checkpoint(TARGET_CONFIG), checkpoint(draft)))) is fires


@pytest.mark.parametrize(
    ("ids", "fires"),
    [([2, 30, 58], False), ([2, 30, 61], True), ([1, 64], True)],
)
def test_aux_layer_ids_beyond_the_target_fail_on_the_first_request(ids, fires):
    draft = checkpoint({"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}})
    found = [f for f in rules.aux_layer_rule(checkpoint(TARGET_CONFIG), draft, None) if f.severity == "fail"]
    assert bool(found) is fires


HOOK_DEF = "def set_eagle3_layers_to_capture(self, layer_ids=None):\n    if not self.pp_group.is_last_rank:\n        return\n{}"
CONDITIONAL = "if layer_ids and layer_ids[0] == 1:\n    self.model.layers_to_capture = [val + 1 for val in layer_ids]\nelse:\n    self.model.layers_to_capture = list(layer_ids)"
FINAL_BOUNDARY = "if layer_ids and max(layer_ids) == self.config.num_hidden_layers:\n    self.model.layers_to_capture = list(layer_ids)\nelse:\n    self.model.layers_to_capture = [val + 1 for val in layer_ids]"


@pytest.mark.parametrize(
    ("body", "ids", "captured", "how", "condition"),
    [
        ("self.model.layers_to_capture = [val + 1 for val in layer_ids]", [2, 30, 58], (3, 31, 59), "shifted by one", ""),
        ("self.model.layers_to_capture = list(layer_ids)", [2, 30, 58], (2, 30, 58), "taken as they are", ""),
        (CONDITIONAL, [1, 29, 57], (2, 30, 58), "shifted by one", "`layer_ids and layer_ids[0] == 1` is true"),
        (CONDITIONAL, [2, 30, 58], (2, 30, 58), "taken as they are", "`layer_ids and layer_ids[0] == 1` is false"),
        (FINAL_BOUNDARY, [2, 30, 61], (2, 30, 61), "taken as they are", "`layer_ids and max(layer_ids) == self.config.num_hidden_layers` is true"),
        (FINAL_BOUNDARY, [2, 30, 58], (3, 31, 59), "shifted by one", "`layer_ids and max(layer_ids) == self.config.num_hidden_layers` is false"),
        # kept on self, then handed to the backbone (the fixture's DeepSeek-V2 shape)
        ("self.layers_to_capture = [val + 1 for val in layer_ids]\nself.model.layers_to_capture = self.layers_to_capture", [2], (3,), "shifted by one", ""),
        ("self.model.layers_to_capture = [val + 2 for val in layer_ids if val > 0]", [0, 4], (6,), "mapped to [6]", ""),
        # what this reading does not follow is said, never guessed
        ("for k in layer_ids:\n    self.model.layers_to_capture = [k]", [2], None, "does not follow", ""),
        ("if hasattr(self.model, 'x'):\n    self.model.x(layer_ids)\nelse:\n    self.model.layers_to_capture = layer_ids", [2], None, "does not follow (hasattr", ""),
    ],
)
def test_the_layers_captured_are_the_targets_hook_followed_with_the_drafts_ids(body, ids, captured, how, condition):
    source = HOOK_DEF.format(textwrap.indent(body, "    "))
    mapping = rules.layer_mapping(source, ids, {"num_hidden_layers": 61})
    assert mapping is not None and mapping.captured == captured and how in mapping.how
    assert mapping.condition == condition


def test_a_hook_that_only_delegates_says_nothing_of_the_layers():
    source = HOOK_DEF.format("    self.language_model.set_eagle3_layers_to_capture(layer_ids)")
    assert rules.layer_mapping(source, [2, 30, 58]) is None


@pytest.mark.parametrize(
    ("body", "final", "ids", "fails"),
    [
        ("self.model.layers_to_capture = [val + 1 for val in layer_ids]", False, [2, 30, 59], False),
        # shifted past the last layer: never captured, though the draft's own ids are in range
        ("self.model.layers_to_capture = [val + 1 for val in layer_ids]", False, [2, 30, 60], True),
        ("self.model.layers_to_capture = list(layer_ids)", False, [2, 30, 60], False),
        # a backbone that captures after its last layer takes the id equal to the layer count
        (FINAL_BOUNDARY, True, [2, 30, 61], False),
        (FINAL_BOUNDARY, False, [2, 30, 61], True),
    ],
)
def test_ids_the_targets_hook_moves_past_the_last_layer_fail(body, final, ids, fails):
    hook = rules.TargetHook(HOOK_DEF.format(textwrap.indent(body, "    ")), "models/x.py:1", final)
    draft = checkpoint({"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}})
    found = [f for f in rules.aux_layer_rule(checkpoint(TARGET_CONFIG), draft, hook) if f.severity == "fail"]
    assert bool(found) is fails
    assert all(f.where == "models/x.py:1" for f in found)


def test_a_backbone_capturing_after_its_last_layer_is_read_from_the_module():
    assert rules.captures_after_last_layer(ast.parse("if self.end_layer in self.layers_to_capture:\n    aux.append(h)"))
    assert not rules.captures_after_last_layer(ast.parse("if i in self.layers_to_capture:\n    aux.append(h)"))


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"max_position_embeddings": 131072}, 131072),
        ({"max_position_embeddings": 4096, "rope_scaling": {"factor": 8.0}}, 32768),
        ({"max_position_embeddings": 262144, "rope_scaling": {"factor": 64.0, "original_max_position_embeddings": 4096}}, 262144),
        ({"max_position_embeddings": 131072, "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}}, 131072),
        ({"seq_length": 8192, "max_position_embeddings": 4096}, 8192),  # the keys in the tree's order
    ],
)
def test_the_context_length_is_derived_as_sglang_derives_it(config, expected):
    keys = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")
    assert rules.derived_context(checkpoint(config), keys) == expected


def test_the_draft_weights_are_read_from_their_header_only():
    weights = read_header(DRAFT / "model.safetensors")
    assert weights["d2t"].shape == (32000,) and weights["fc.weight"].shape == (7168, 3 * 7168)
    assert (DRAFT / "model.safetensors").stat().st_size < 4096  # no tensor data


EAGLE_HEAD = """
import re

from sglang.srt.models.llama import LlamaForCausalLM


class EagleModel:
    def __init__(self, config):
        self.embed_tokens = None
        self.fc = None
        self.{layer} = None
        self.norm = None


class HeadForCausalLMEagle3(LlamaForCausalLM):
    def __init__(self, config):
        self.model = EagleModel(config)
        self.lm_head = None

    def load_weights(self, weights):
        params_dict = dict(self.named_parameters())
        renames = {renames}
        for name, loaded_weight in weights:
            for old, new in renames.items():
                if old in name:
                    name = name.replace(old, new)
            name = {sub}
            if "d2t" in name:
                continue
            if name == "t2d" or name.endswith(".t2d"):
                continue
            param_name = name if name in params_dict else f"model.{{name}}"
            if param_name in params_dict:
                params_dict[param_name].weight_loader(loaded_weight)
"""
SPECFORGE = ("d2t", "t2d", "fc.weight", "lm_head.weight", "midlayer.self_attn.q_proj.weight", "norm.weight", "embed_tokens.weight")
LAYERS_0 = ("d2t", "fc.weight", "layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.up_proj.weight", "norm.weight")


def _head_tree(tmp_path: Path, layer: str, renames: str = "{}", sub: str = "name"):
    from eaglepatch.read.source_cache import SourceCache

    srt = tmp_path / "sglang" / "srt"
    (srt / "models").mkdir(parents=True)
    (srt / "models" / "head.py").write_text(EAGLE_HEAD.format(layer=layer, renames=renames, sub=sub))
    (srt / "models" / "llama.py").write_text("class LlamaForCausalLM:\n    def __init__(self, config):\n        self.logits_processor = None\n")
    return SourceCache(srt)


@pytest.mark.parametrize(
    ("layer", "renames", "sub", "weights", "skipped"),
    [
        ("midlayer", "{}", "name", SPECFORGE, []),
        # a head whose decoder layer is `layers`: SpecForge's `midlayer.*` names find no module
        ("layers", "{}", "name", SPECFORGE, ["midlayer.self_attn.q_proj.weight"]),
        # ... unless its loader renames them (0.5.12's legacy map), substring for substring
        ("layers", '{"midlayer": "layers.0"}', "name", SPECFORGE, []),
        # a head that holds `midlayer` and the draft's `layers.0.*` names (0.5.9 - 0.5.11)
        ("midlayer", "{}", "name", LAYERS_0, ["layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.up_proj.weight"]),
        # the Kimi MLA head's `re.sub(r"^layers\.0\.", "midlayer.", name)`
        ("midlayer", "{}", 're.sub(r"^layers\\.0\\.", "midlayer.", name)', LAYERS_0, ["model.layers.0.mlp.up_proj.weight"]),
    ],
)
def test_the_draft_weights_its_class_would_skip_are_named(tmp_path, layer, renames, sub, weights, skipped):
    loader = rules.read_draft_loader(_head_tree(tmp_path, layer, renames, sub), "models/head.py", "HeadForCausalLMEagle3")
    assert loader is not None and {"d2t", "t2d"} <= set(loader.consumed)
    assert "logits_processor" in loader.modules  # read through the models module it imports from
    assert rules.unloaded_weights(weights, loader) == skipped
    found = list(rules.draft_weights_rule(checkpoint({}, weights), loader))
    assert bool(found) is bool(skipped)
    if skipped:
        (warn,) = found
        line = EAGLE_HEAD.splitlines().index("    def load_weights(self, weights):") + 1
        assert warn.severity == "warn" and warn.when == "silent" and warn.where == f"models/head.py:{line}"
        assert f"{len(skipped)} of the draft's {len(weights)} weights" in warn.message and skipped[0] in warn.message


def test_a_loader_of_another_shape_is_not_read(tmp_path):
    tree = _head_tree(tmp_path, "midlayer")
    path = tree.srt / "models" / "head.py"
    path.write_text(path.read_text().replace('f"model.{name}"', "name"))
    assert rules.read_draft_loader(tree, "models/head.py", "HeadForCausalLMEagle3") is None
    assert rules.read_draft_loader(tree, "models/missing.py", "HeadForCausalLMEagle3") is None


def _safetensors(path: Path, names: tuple[str, ...]) -> None:
    """A valid .safetensors file of one BF16 element per tensor: the header is what preflight reads."""
    import struct

    header = {name: {"dtype": "BF16", "shape": [1], "data_offsets": [2 * i, 2 * i + 2]} for i, name in enumerate(names)}
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(2 * len(names)))


def test_preflight_names_the_draft_weights_only_for_an_eagle_head(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(CHECKOUT, tree, ignore=shutil.ignore_patterns("__pycache__", ".git"))
    head = tree / "python" / "sglang" / "srt" / "models" / "llama_eagle3.py"
    head.write_text(head.read_text().replace("\n\nEntryClass", textwrap.indent(
        "\ndef load_weights(self, weights):\n    params_dict = dict(self.named_parameters())\n    for name, w in weights:\n"
        "        if \"d2t\" in name or \"t2d\" in name:\n            continue\n"
        "        param = name if name in params_dict else f\"model.{name}\"\n", "    ") + "\n\nEntryClass"))
    draft = tmp_path / "draft"
    shutil.copytree(DRAFT, draft)
    _safetensors(draft / "model.safetensors", ("d2t", "fc.weight", "transformer.h.0.attn.weight", "lm_head.weight"))
    _, data = preflight(tree, launch(draft=draft))
    (warn,) = by_check(data)["draft-weights"]
    assert "transformer.h.0.attn.weight" in warn["message"] and warn["where"].startswith("models/llama_eagle3.py:")
    _, other = preflight(tree, launch(draft=draft, algorithm="NGRAM"))
    assert "draft-weights" not in by_check(other)


@pytest.mark.parametrize(
    ("branch", "expected"),
    [
        ('if is_draft_model and self.hf_config.architectures[0] == "MiMoForCausalLM":\n    self.hf_config.architectures[0] = "MiMoMTP"',
         {"MiMoForCausalLM": "MiMoMTP"}),
        ('if is_draft_model and self.hf_config.architectures[0] in ["A", "B"]:\n    self.hf_config.architectures[0] = "ANextN"',
         {"A": "ANextN", "B": "ANextN"}),
        # a further condition, or a body that decides further: not the class for every draft
        ('if is_draft_model and self.speculative_algorithm == "DSPARK" and self.hf_config.architectures[0] == "A":\n'
         '    self.hf_config.architectures[0] = "ADSpark"', {}),
        ('if is_draft_model and self.hf_config.architectures[0] == "A":\n    if bundled:\n        self.hf_config.architectures[0] = "X"\n'
         '    else:\n        self.hf_config.architectures[0] = "Y"', {}),
        # the target's own branch
        ('if self.hf_config.architectures[0] == "A":\n    self.hf_config.architectures[0] = "B"', {}),
    ],
)
def test_the_architectures_the_model_config_rewrites_for_a_draft_are_read(tmp_path, branch, expected):
    from eaglepatch.read.source_cache import SourceCache

    srt = tmp_path / "sglang" / "srt"
    (srt / "configs").mkdir(parents=True)
    source = "class ModelConfig:\n    def _config_draft_model(self):\n        is_draft_model = self.is_draft_model\n" + textwrap.indent(branch, " " * 8)
    (srt / "configs" / "model_config.py").write_text(source + "\n")
    found = rules.read_draft_rewrites(SourceCache(srt))
    assert {k: v[0] for k, v in found.items()} == expected
    assert all(at == "configs/model_config.py:4" for _, at in found.values())


def test_a_draft_is_looked_up_as_the_class_the_model_config_leaves_it():
    rewrites = {"A": ("B", "configs/model_config.py:10"), "B": ("C", "configs/model_config.py:20"), "D": ("A", "configs/model_config.py:5")}
    assert rules.draft_loaded_as("A", rewrites) == ("C", "configs/model_config.py:20")  # file order: A -> B, then B -> C
    assert rules.draft_loaded_as("D", rewrites) == ("C", "configs/model_config.py:20")
    assert rules.draft_loaded_as("B", {"B": ("C", "m:20"), "C": ("B", "m:10")}) == ("C", "m:20")  # C -> B ran before
    assert rules.draft_loaded_as("Z", rewrites) == ("Z", "")
    facts = rules.TreeFacts(registry={"C": "models/c.py"}, draft_rewrites=rewrites)
    found = list(rules.architecture_rules(None, checkpoint({"architectures": ["A"]}), "EAGLE", facts))
    assert [(f.check, f.severity, f.where) for f in found] == [
        ("draft-architecture", "info", "configs/model_config.py:20"), ("draft-architecture", "info", "models/c.py")]


# --------------------------------------------------------------------------- real releases


@pytest.mark.integration
def test_the_seeds_launch_on_0_5_9(sglang_059):
    code, data = preflight(sglang_059, launch())
    found = by_check(data)
    assert code == 1
    missing = sorted(f["message"].split(": ")[1].split(" ")[0] for f in found["target-hooks"])
    assert missing == ["get_embed_and_head", "set_eagle3_layers_to_capture"]
    (context,) = found["context-length"]
    assert context["where"].startswith("configs/model_config.py:") and SWITCH in context["fix"]
    (aux,) = found["aux-layer-ids"]
    assert "shifted by one (each k becomes k + 1)" in aux["message"] and "enters layers [3, 31, 59]" in aux["message"]
    assert aux["where"].startswith("models/deepseek_v2.py:")


@pytest.mark.integration
def test_the_same_launch_on_the_newest_release_reads_its_dataclass_options():
    import sglang_releases

    newest = sglang_releases.read_releases()[-1]
    site = sglang_releases.site_packages(newest)
    code, data = preflight(site, launch(algorithm="EAGLE3"))
    found = by_check(data)
    assert "launch-arguments" not in found  # --model-path, --tp and the speculative options are its fields'
    assert "target-hooks" not in found  # upstream fixed Kimi-K2.5's hooks by hand since 0.5.9
    assert found["context-length"][0]["severity"] == "fail"
    # the same draft, other layers: this release's hook shifts only ids starting at 1 (0.5.9's: always)
    (aux,) = found["aux-layer-ids"]
    assert "taken as they are" in aux["message"] and "[0] == 1` is false" in aux["message"]
    assert "enters layers [2, 30, 58]" in aux["message"]
    _, ambiguous = preflight(site, launch(draft=None) + ["--speculative-draft", "x"])
    assert "ambiguous option" in by_check(ambiguous)["launch-arguments"][0]["message"]


def _release_trees(middle: bool = False) -> list:
    """The oldest and newest pinned release, and with `middle` one that declares its options as fields
    of ServerArgs itself (0.5.14 - 0.5.19). How every release's options are read is held against its
    own parser in tests/test_launch_oracle.py; the rules need the two ends."""
    import sglang_releases

    pinned = sglang_releases.read_releases()
    chosen = (pinned[0], pinned[len(pinned) // 2], pinned[-1]) if middle else (pinned[0], pinned[-1])
    return [pytest.param(v, marks=pytest.mark.integration, id=v) for v in dict.fromkeys(chosen)]


@pytest.fixture(scope="module")
def release_site(request):
    import sglang_releases

    return sglang_releases.site_packages(request.param)


@pytest.mark.parametrize("release_site", _release_trees(), indirect=True)
def test_each_rule_both_ways_on_the_oldest_and_newest_release(release_site, tmp_path):
    """The rules that read the tree (its options, its context switch, its registry) fire and stay
    quiet on real releases as on the fixture."""
    def checks(words: list[str]) -> dict[str, list[dict]]:
        return by_check(preflight(release_site, words)[1])

    seed = checks(launch())
    assert seed["context-length"][0]["severity"] == "fail" and seed["context-length"][0]["fix"].startswith(f"set {SWITCH}=1")
    assert checks(launch(env=(f"{SWITCH}=1",)))["context-length"][0]["severity"] == "warn"
    assert "context-length" not in checks(launch("--context-length", "131072"))
    assert "draft-path-missing" in checks(launch(draft=None)) and "draft-path-missing" not in seed
    assert "ambiguous option" in checks(launch(draft=None) + ["--speculative-draft", str(DRAFT)])["launch-arguments"][0]["message"]
    assert "launch-arguments" not in seed and "launch-arguments" in checks(launch("--no-such-option"))
    assert "algorithm-draft-mismatch" in checks(launch(algorithm="EAGLE")) and "algorithm-draft-mismatch" not in seed
    assert {f["severity"] for f in seed["draft-architecture"]} == {"info"}  # LlamaForCausalLMEagle3 is registered
    renamed = tmp_path / "draft"
    shutil.copytree(DRAFT, renamed)
    config = json.loads((renamed / "config.json").read_text())
    config.update(architectures=["NoSuchEagle3"], hidden_size=4096, draft_vocab_size=32000)
    (renamed / "config.json").write_text(json.dumps(config))
    (renamed / "model.safetensors").unlink()
    odd = checks(launch(draft=renamed))
    assert odd["draft-architecture"][0]["severity"] == "fail" and odd["hidden-size"][0]["severity"] == "fail"
    assert odd["draft-vocab-mapping"][0]["when"] == "silent"
    assert "hidden-size" not in seed and "draft-vocab-mapping" not in seed  # the d2t is in its header
    # read from the release: NEXTN's rename, the MLA kernel the draft inherits, the quantization it inherits
    nextn = checks(launch(algorithm="NEXTN"))
    assert nextn["algorithm-alias"][0]["message"].startswith("--speculative-algorithm NEXTN runs as EAGLE")
    assert "algorithm-draft-mismatch" in nextn and "algorithm-alias" not in seed
    latent = checks(launch("--attention-backend", "flashmla"))
    assert [f["severity"] for f in latent["draft-attention-backend"]] == ["fail"]
    assert "draft-attention-backend" not in checks(launch("--attention-backend", "flashmla", "--speculative-draft-attention-backend", "fa3"))
    quantized = checks(launch("--quantization", "fp8"))
    assert quantized["draft-quantization"][0]["fix"] == "pass --speculative-draft-model-quantization unquant"
    assert "draft-quantization" not in checks(launch("--quantization", "fp8", "--speculative-draft-model-quantization", "unquant"))
    assert "draft-quantization" not in seed
    half = checkpoint_copy(tmp_path, DRAFT, "half", torch_dtype="float16")
    assert checks(launch(draft=half))["dtype"][0]["severity"] == "fail"
    assert "dtype" not in checks(launch("--dtype", "bfloat16", draft=half)) and "dtype" not in seed
    deepseek = tmp_path / "deepseek"
    shutil.copytree(TARGET, deepseek)
    config = json.loads((deepseek / "config.json").read_text())
    config.update(architectures=["DeepseekV3ForCausalLM"])
    (deepseek / "config.json").write_text(json.dumps(config))
    assert checks(launch(target=deepseek, draft=None, algorithm="EAGLE"))["draft-path-missing"][0]["severity"] == "info"
    assert checks(launch(target=deepseek, draft=None))["draft-path-missing"][0]["severity"] == "fail"


@pytest.mark.integration
@pytest.mark.parametrize(("version", "skipped"), [("0.5.9", ["layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.up_proj.weight"]),
                                                 (None, [])])
def test_a_drafts_layers_0_names_load_only_where_the_release_renames_them(version, skipped):
    """0.5.9's LlamaForCausalLMEagle3 holds `midlayer` and skips `layers.0.*` without a word; the
    newest renames `midlayer` to `layers.0` and loads both namings."""
    import sglang_releases

    from eaglepatch.read.source_cache import SourceCache

    srt = sglang_releases.site_packages(version or sglang_releases.read_releases()[-1]) / "sglang" / "srt"
    loader = rules.read_draft_loader(SourceCache(srt), "models/llama_eagle3.py", "LlamaForCausalLMEagle3")
    assert loader is not None
    assert rules.unloaded_weights(LAYERS_0, loader) == skipped
    assert rules.unloaded_weights(SPECFORGE, loader) == []


@pytest.mark.integration
@pytest.mark.parametrize("version", ["0.5.9", None])
def test_deepseek_v3_as_a_draft_is_served_by_its_nextn_class(version):
    import sglang_releases

    from eaglepatch.read.source_cache import SourceCache

    srt = sglang_releases.site_packages(version or sglang_releases.read_releases()[-1]) / "sglang" / "srt"
    tree = SourceCache(srt)
    loaded, at = rules.draft_loaded_as("DeepseekV3ForCausalLM", rules.read_draft_rewrites(tree))
    assert loaded == "DeepseekV3ForCausalLMNextN" and at.startswith("configs/model_config.py:")
    assert rules.read_registry(tree)[0][loaded] == "models/deepseek_nextn.py"
    assert rules.draft_loaded_as("LlamaForCausalLMEagle3", rules.read_draft_rewrites(tree)) == ("LlamaForCausalLMEagle3", "")


def _from_0_5_15() -> list:
    import sglang_releases

    pinned = [v for v in sglang_releases.read_releases() if tuple(int(p) for p in v.split(".")[:3]) >= (0, 5, 15)]
    return [pytest.param(v, marks=pytest.mark.integration, id=v) for v in pinned]


@pytest.mark.parametrize("version", _from_0_5_15())
def test_deprecated_flags_take_no_value_as_the_release_parser_builds_them(version):
    """0.5.15 on register `--disable-cuda-graph` (and others) with a deprecated-flag action whose
    `__init__` sets `nargs=0`: the word after the flag is the next option, not its value."""
    import sglang_releases

    from eaglepatch.read.launch_line import read_launch, read_options
    from eaglepatch.read.source_cache import SourceCache

    options = read_options(SourceCache(sglang_releases.site_packages(version) / "sglang" / "srt"))
    flags = [f for f in ("--disable-cuda-graph", "--disable-piecewise-cuda-graph", "--enable-dp-attention") if f in options.by_string]
    assert "--disable-cuda-graph" in flags
    for flag in flags:
        line = read_launch(["python", "-m", "sglang.launch_server", "--model-path", "m", flag, "--tp", "8"], options)
        assert not line.errors, (flag, line.errors)
        tp, _ = options.match("--tp")  # a prefix of --tp-size
        assert tp is not None and line.values[options.by_string[flag].dest] is True and line.get(tp.dest) == "8"


def _options(*specs: tuple[str, str, str]) -> Options:
    """Options from (spelling, action, takes) triples; a second spelling after a comma."""
    by_string = {}
    for strings, action, takes in specs:
        names = tuple(strings.split(","))
        option = Option(names, names[0].lstrip("-").replace("-", "_"), takes, "s:1", action=action)
        by_string.update(dict.fromkeys(names, option))
    return Options(by_string, True, "s")


CONFIG_CASES = [
    # (YAML mapping, merger as of 0.5.9-0.5.13 (False) or 0.5.23 (True), words, refusal)
    ({"model-path": "m", "tp-size": 8}, False, ["--model-path", "m", "--tp-size", "8"], None),
    ({"enable-metrics": True, "trust-remote-code": False}, False, ["--enable-metrics"], None),  # store_true: True is the flag
    ({"disable-radix": True}, False, ["--disable-radix", "true"], None),  # a `store` of a bool: the value as text
    ({"lora-paths": ["a", "b"], "other": []}, False, ["--lora-paths", "a", "b"], None),
    ({"json-model-override-args": {"a": 1}}, True, ["--json-model-override-args", '{"a": 1}'], None),
    ({"json-model-override-args": {"a": 1}}, False, ["--json-model-override-args", "{'a': 1}"], None),
    ({"disable-cuda-graph": True}, False, [], "Unsupported config option 'disable_cuda_graph'"),  # a class action, nargs=0
    ({"alias": "x"}, True, ["--alias", "x"], None),  # 0.5.23: a one-value class action is supported
    ({"alias": "x"}, False, [], "Unsupported config option 'alias'"),
]


@pytest.mark.parametrize(("data", "newest", "words", "refused"), CONFIG_CASES)
def test_a_config_file_becomes_the_words_the_releases_merger_makes(data, newest, words, refused):
    from eaglepatch.read.launch_config import ConfigMerger, config_words

    options = _options(("--model-path", "store", "one"), ("--tp-size", "store", "one"), ("--enable-metrics", "store_true", "none"),
                       ("--trust-remote-code", "store_true", "none"), ("--disable-radix", "store", "one"), ("--lora-paths", "store", "many"),
                       ("--json-model-override-args", "store", "one"), ("--disable-cuda-graph", "", "none"), ("--alias", "", "one"))
    merger = ConfigMerger("m:1", spellings=newest, single_values=newest, json_mappings=newest)
    got, why = config_words(data, options, merger)
    if refused is None:
        assert (got, why) == (words, [])
    else:
        assert len(why) == 1 and refused in why[0]


def test_the_config_files_words_come_first_so_the_line_wins(tmp_path):
    from eaglepatch.read.launch_config import ConfigMerger

    options = _options(("--model-path", "store", "one"), ("--tp-size", "store", "one"), ("--config", "store", "one"))
    options = Options(options.by_string, True, "s", ConfigMerger("m:1", True, True, True))
    config = tmp_path / "server.yaml"
    config.write_text("model-path: /models/a\ntp-size: 4\n")
    line = read_launch(["python", "-m", "sglang.launch_server", "--tp-size", "8", "--config", str(config)], options)
    assert not line.errors and line.config == str(config)
    assert line.get("model_path") == "/models/a" and line.get("tp_size") == "8"
    for name, why in (("server.json", "must be YAML"), ("absent.yaml", "not found")):
        line = read_launch(["python", "-m", "sglang.launch_server", "--config", str(tmp_path / name)], options)
        assert len(line.errors) == 1 and why in line.errors[0]
    line = read_launch(["python", "-m", "sglang.launch_server", "--config", str(config), "--config", str(config)], options)
    assert line.errors == ("Multiple config files specified! Only one allowed.",)


@pytest.mark.parametrize("version", _from_0_5_15())
def test_a_config_launch_passes_where_the_release_merges_it(version, tmp_path):
    """`--config server.yaml` holding the model path: the release's merger puts it on the line."""
    import sglang_releases

    from eaglepatch.read.launch_line import read_options
    from eaglepatch.read.source_cache import SourceCache

    options = read_options(SourceCache(sglang_releases.site_packages(version) / "sglang" / "srt"))
    assert options.merger is not None
    config = tmp_path / "server.yaml"
    config.write_text("model-path: /models/kimi-k2.5\ntp-size: 8\ntrust-remote-code: true\n")
    line = read_launch(["python", "-m", "sglang.launch_server", "--config", str(config), "--port", "30000"], options)
    assert not line.errors and not line.missing_required, (line.errors, line.missing_required)
    assert line.get("model_path") == "/models/kimi-k2.5" and line.values["trust_remote_code"] is True


ALLOWED_CASES = [
    # (server_args.py's option, the value on the line, the finding: None, "fail" or "warn")
    ('p.add_argument("--b", choices=["x", "y"])', "x", None),
    ('p.add_argument("--b", choices=["x", "y"])', "z", "fail"),
    ('B = ["x", "y"]\np.add_argument("--b", choices=B)', "z", "fail"),
    ('B = ["x"]\nadd_b_choices = B.extend\np.add_argument("--b", choices=B)', "z", "warn"),  # a plugin may add it
    ('B = ["x"]\nB.append("y")\np.add_argument("--b", choices=B)', "y", "warn"),  # appended at import: not read
    ('p.add_argument("--b", choices=[*B, "x"])', "z", None),  # not read whole: not checked
    ('p.add_argument("--b", type=int, choices=["1"])', "2", None),  # converted before the check
    ('p.add_argument("--b", type=str, choices=["x"])', "z", "fail"),
    ('p.add_argument("--b", nargs="+", choices=["x", "y"])', "x z", "fail"),
]


@pytest.mark.parametrize(("text", "value", "finding"), ALLOWED_CASES)
def test_a_value_outside_an_options_choices_is_what_argparse_refuses(tmp_path, text, value, finding):
    from eaglepatch.read.launch_line import read_options
    from eaglepatch.read.source_cache import SourceCache

    srt = tmp_path / "sglang" / "srt"
    srt.mkdir(parents=True)
    (srt / "server_args.py").write_text("import argparse\np = argparse.ArgumentParser()\n" + text + "\n")
    line = read_launch(["python", "-m", "sglang.launch_server", "--b", *value.split()], read_options(SourceCache(srt)))
    found = [(f.severity, f.message) for f in rules.launch_rules(line)]
    if finding is None:
        assert not found
    else:
        ((severity, message),) = found
        assert severity == finding and f"invalid choice: {value.split()[-1]!r}" in message


def test_a_flag_given_a_value_is_what_argparse_refuses():
    options = _options(("--enable-metrics", "store_true", "none"))
    line = read_launch(["python", "-m", "sglang.launch_server", "--enable-metrics=1"], options)
    assert line.errors == ("argument --enable-metrics: ignored explicit argument '1'",)


@pytest.mark.parametrize("release_site", _release_trees(middle=True), indirect=True)
def test_choices_are_checked_on_the_oldest_middle_and_newest_release(release_site):
    """A backend the release lists passes; one it does not gets a finding (a `warn`: the list can be
    extended by a plugin in every pinned release)."""
    from eaglepatch.read.launch_line import read_options
    from eaglepatch.read.source_cache import SourceCache

    options = read_options(SourceCache(release_site / "sglang" / "srt"))
    assert options.serve_at and options.serve_at.startswith("../cli/main.py:")  # every pinned release has `sglang serve`
    base = ["python", "-m", "sglang.launch_server", "--model-path", "m", "--attention-backend"]
    assert not list(rules.launch_rules(read_launch([*base, "triton"], options)))
    (finding,) = rules.launch_rules(read_launch([*base, "no-such-backend"], options))
    assert finding.severity == "warn" and "invalid choice: 'no-such-backend'" in finding.message and finding.where


def test_sglang_serve_is_a_launch_only_where_the_release_has_the_command(tmp_path):
    from eaglepatch.read.launch_line import read_options
    from eaglepatch.read.source_cache import SourceCache

    srt = tmp_path / "sglang" / "srt"
    srt.mkdir(parents=True)
    (srt / "server_args.py").write_text('import argparse\np = argparse.ArgumentParser()\np.add_argument("--model-path")\n')
    words = ["sglang", "serve", "--model-path", "m"]
    assert read_launch(words, read_options(SourceCache(srt))).errors[0].startswith("this release has no `sglang serve` command")
    (tmp_path / "sglang" / "cli").mkdir()
    (tmp_path / "sglang" / "cli" / "main.py").write_text('sub = p.add_subparsers()\nserve = sub.add_parser(\n    "serve", help="Launch.")\n')
    options = read_options(SourceCache(srt))
    assert options.serve_at == "../cli/main.py:2" and not read_launch(words, options).errors
    assert not read_launch(["python", "-m", "sglang.launch_server", "--model-path", "m"], options).errors


OLD_STYLE_LOADER = '''
from sglang.srt.models.llama import LlamaForCausalLM


class Model:
    def __init__(self, config):
        self.fc = None


class HeadForCausalLMEagle3(LlamaForCausalLM):
    def __init__(self, config):
        self.model = Model(config)
        self.lm_head = None

    def load_weights(self, weights):
        for name, loaded_weight in weights:
            if "d2t" in name:
                {d2t}
            if "d2t" not in name and "t2d" not in name and "lm_head" not in name:
                new_name = f"model.{{name}}"
                super().load_weights([(new_name, loaded_weight)])
            elif "lm_head" in name:
                super().load_weights([(name, loaded_weight)])
'''


@pytest.mark.parametrize(
    ("d2t", "skipped"),
    [
        # d2t read into the hot-token map, t2d left out on purpose (the 0.4.5/0.4.6 shape): nothing skipped unawares
        ("self.hot_token_id = loaded_weight", []),
        ("pass", []),  # d2t and t2d left out by the loading branch's own `not in` tests
    ],
)
def test_a_tensor_the_loader_takes_or_leaves_out_on_purpose_is_not_skipped(tmp_path, d2t, skipped):
    from eaglepatch.read.source_cache import SourceCache

    srt = tmp_path / "sglang" / "srt"
    (srt / "models").mkdir(parents=True)
    (srt / "models" / "head.py").write_text(OLD_STYLE_LOADER.format(d2t=d2t))
    (srt / "models" / "llama.py").write_text("class LlamaForCausalLM:\n    def __init__(self, config):\n        self.logits_processor = None\n")
    loader = rules.read_draft_loader(SourceCache(srt), "models/head.py", "HeadForCausalLMEagle3")
    assert loader is not None and {"d2t", "t2d"} <= set(loader.consumed)
    assert rules.unloaded_weights(["d2t", "t2d", "fc.weight", "lm_head.weight"], loader) == skipped
    assert not list(rules.draft_weights_rule(checkpoint({}, ("d2t", "t2d", "fc.weight")), loader))


_SERVE_LOOKS = '''\
from sglang.cli.utils import get_model_path


def serve(args, extra_argv):
    model_path = get_model_path(extra_argv)
'''
_SERVE_POSITIONAL = '''\
from sglang.cli.utils import get_model_path


def _normalize_positional_model_path(extra_argv):
    if extra_argv and not extra_argv[0].startswith("-"):
        return ["--model-path", extra_argv[0], *extra_argv[1:]], True
    return extra_argv, False


def serve(args, extra_argv):
    dispatch_argv, _ = _normalize_positional_model_path(extra_argv)
    get_model_path(dispatch_argv)
'''
_FINDS_ONE = '''\
def get_model_path(extra_argv):
    if any(h in extra_argv for h in ["-h", "--help"]):
        raise Exception("usage")
    for i, arg in enumerate(extra_argv):
        if arg == "--model-path":
            return extra_argv[i + 1]
        elif arg.startswith("--model-path="):
            return arg.split("=", 1)[1]
    raise Exception("Error: --model-path is required.")
'''
_FINDS_TWO = '''\
def try_get_model_path(extra_argv):
    for i, arg in enumerate(extra_argv):
        if arg in ("--model-path", "--model"):
            return extra_argv[i + 1]
        elif arg.startswith("--model-path=") or arg.startswith("--model="):
            return arg.split("=", 1)[1]


def get_model_path(extra_argv):
    model_path = try_get_model_path(extra_argv)
    if model_path is None:
        raise Exception("Error: --model-path is required.")
    return model_path
'''

SERVE_FRONT_CASES = [
    # (sglang/cli/serve.py, sglang/cli/utils.py, the words after `sglang serve`, what the release says: None (runs) or its refusal)
    (_SERVE_LOOKS, _FINDS_ONE, "--model-path m --tp 2", None),
    (_SERVE_LOOKS, _FINDS_ONE, "--model-path=m", None),
    (_SERVE_LOOKS, _FINDS_ONE, "--model m", "--model-path is required"),  # 0.5.9's serve looks for --model-path only
    (_SERVE_LOOKS, _FINDS_ONE, "m --tp 2", "--model-path is required"),  # no positional model before 0.5.16
    (_SERVE_POSITIONAL, _FINDS_TWO, "m --tp 2", None),  # 0.5.16 on: `sglang serve MODEL`
    (_SERVE_POSITIONAL, _FINDS_TWO, "--model=m", None),
    (_SERVE_POSITIONAL, _FINDS_TWO, "--tp 2 --config server.yaml", "--model-path is required"),  # issue #36105: a path in --config is not seen
]


@pytest.mark.parametrize(("serve", "utils", "words", "refused"), SERVE_FRONT_CASES)
def test_sglang_serve_rewrites_and_checks_the_words_as_the_releases_serve_does(tmp_path, serve, utils, words, refused):
    from eaglepatch.read.launch_line import read_options
    from eaglepatch.read.source_cache import SourceCache

    srt = tmp_path / "sglang" / "srt"
    srt.mkdir(parents=True)
    (srt / "server_args.py").write_text('import argparse\np = argparse.ArgumentParser()\np.add_argument("--model-path", "--model")\n'
                                        'p.add_argument("--tp")\np.add_argument("--config")\n')
    cli = tmp_path / "sglang" / "cli"
    cli.mkdir()
    (cli / "main.py").write_text('sub = p.add_subparsers()\nsub.add_parser("serve")\n')
    (cli / "serve.py").write_text(serve)
    (cli / "utils.py").write_text(utils)
    options = read_options(SourceCache(srt))
    line = read_launch(["sglang", "serve", *words.split()], options)
    if refused is None:
        assert not line.errors and line.get("model_path") == "m"
    else:
        assert any(refused in error for error in line.errors), line.errors
    # `python -m sglang.launch_server` goes to the parser directly: serve's check is not its own
    direct = read_launch(["python", "-m", "sglang.launch_server", "--tp", "2"], options)
    assert not any("sglang serve" in error for error in direct.errors)


def _dflash_pair(tmp_path: Path, ids: list[int] | None) -> tuple[Path, Path]:
    """A 32-layer Qwen3 target and a DFlash draft (config.json only: no weight is read for these rules)."""
    target = tmp_path / "qwen3"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 32, "hidden_size": 4096,
        "max_position_embeddings": 40960, "torch_dtype": "bfloat16", "vocab_size": 151936,
    }))
    draft = tmp_path / "dflash"
    draft.mkdir()
    config: dict = {"architectures": ["DFlashDraftModel"], "num_hidden_layers": 5, "hidden_size": 4096, "max_position_embeddings": 40960,
                    "torch_dtype": "bfloat16", "vocab_size": 151936, "dflash_config": {"block_size": 16}}
    if ids is not None:
        config["dflash_config"]["target_layer_ids"] = ids
    (draft / "config.json").write_text(json.dumps(config))
    return target, draft


@pytest.mark.parametrize("release_site", _release_trees(), indirect=True)
@pytest.mark.parametrize(
    ("ids", "severity", "words"),
    [
        ([1, 8, 15, 22, 29], None, None),  # a draft trained on this target
        (None, "warn", "picks the target's layers itself"),
        ([1, 8, 15, 22, 32], "fail", "outside the target's 32 layers"),  # the release's own range check
        ([1, 8, 15, 22, 31], "fail", "capture nothing"),  # in range, but the target's hook captures after layer k: 32
    ],
)
def test_a_dflash_drafts_layer_ids_are_followed_through_the_release(release_site, tmp_path, ids, severity, words):
    import sglang_releases

    target, draft = _dflash_pair(tmp_path, ids)
    words_of_launch = launch(target=target, draft=draft, algorithm="DFLASH")
    code, data = preflight(release_site, words_of_launch)
    found = by_check(data).get("dflash-layer-ids", [])
    if release_site == sglang_releases.site_packages("0.5.9"):
        assert not found  # no DFlash in 0.5.9: nothing to say
        return
    assert [f["severity"] for f in found] == ([severity] if severity else [])
    if words:
        assert words in found[0]["message"] and found[0]["where"]


@pytest.mark.parametrize(
    ("added", "fires"),
    [
        ({"norm_before_fc": True}, True),  # a key SpecForge writes that the release's head does not read
        ({"norm_before_fc": False}, False),  # unset is how the release runs it anyway
        ({"draft_vocab_size": 32000}, False),  # read by the tree
        ({"_name_or_path": "x", "transformers_version": "4.57"}, False),  # bookkeeping
    ],
)
def test_a_draft_config_key_no_code_reads_is_a_silent_warning(tmp_path, added, fires):
    draft = checkpoint_copy(tmp_path, DRAFT, "draft", **added)
    _, data = preflight(CHECKOUT, launch(draft=draft))
    found = by_check(data).get("draft-config-keys", [])
    assert [f["severity"] for f in found] == (["warn"] if fires else [])
    if fires:
        assert "norm_before_fc = true" in found[0]["message"] and found[0]["when"] == "silent"


@pytest.mark.parametrize("release_site", _release_trees(), indirect=True)
def test_a_draft_config_key_is_checked_against_the_whole_release(release_site, tmp_path):
    """`norm_before_fc` (SpecForge's) is read by llama_eagle3.py from 0.5.17 on: upstream's own fix
    of the silent loss; before it, the key warns."""
    import sglang_releases

    version = next(v for v in sglang_releases.read_releases() if sglang_releases.site_packages(v) == release_site)
    unread = checkpoint_copy(tmp_path, DRAFT, "unread", norm_before_fc=True)
    read = checkpoint_copy(tmp_path, DRAFT, "read", tie_word_embeddings=True)  # a key every release reads
    found = by_check(preflight(release_site, launch(draft=unread))[1]).get("draft-config-keys", [])
    before_0_5_17 = tuple(int(p) for p in version.split(".")[:3]) < (0, 5, 17)
    assert [f["severity"] for f in found] == (["warn"] if before_0_5_17 else [])
    assert "draft-config-keys" not in by_check(preflight(release_site, launch(draft=read))[1])
    assert "draft-config-keys" not in by_check(preflight(release_site, launch())[1])  # the seed's draft


def _quantized_mtp_target(tmp_path: Path, mtp_quantized: bool) -> Path:
    """A GPTQ DeepSeek-V3-shaped target (2 layers) whose MTP layer (index 2) is quantized or not."""
    target = checkpoint_copy(tmp_path, TARGET, "gptq", architectures=["DeepseekV3ForCausalLM"], num_hidden_layers=2, text_config=None, vision_config=None,
                              quantization_config={"quant_method": "gptq", "bits": 4})
    for old in target.glob("*.safetensors"):
        old.unlink()
    mtp = "model.layers.2.mlp.down_proj." + ("qweight" if mtp_quantized else "weight")
    _safetensors(target / "model.safetensors", ("model.layers.0.mlp.down_proj.qweight", "model.layers.1.mlp.down_proj.qweight", mtp))
    return target


@pytest.mark.parametrize(
    ("mtp_quantized", "extra", "fires"),
    [
        (False, (), True),  # its MTP layers kept in BF16 while the draft inherits gptq
        (True, (), False),
        (False, ("--speculative-draft-model-quantization", "unquant"), False),
    ],
)
def test_a_self_mtp_draft_inheriting_the_targets_quantization_fails(tmp_path, mtp_quantized, extra, fires):
    target = _quantized_mtp_target(tmp_path, mtp_quantized)
    _, data = preflight(CHECKOUT, launch(*extra, target=target, draft=None, algorithm="NEXTN"))
    found = [f for f in by_check(data).get("draft-quantization", []) if "MTP layers" in f["message"]]
    assert [f["severity"] for f in found] == (["fail"] if fires else [])
    if fires:
        assert "model.layers.2.mlp.down_proj.weight" in found[0]["message"] and found[0]["fix"] == "pass --speculative-draft-model-quantization unquant"


@pytest.mark.parametrize("release_site", _release_trees(), indirect=True)
def test_a_self_mtp_draft_is_checked_on_real_releases(release_site, tmp_path):
    unquantized = _quantized_mtp_target(tmp_path / "a", False)
    fine = _quantized_mtp_target(tmp_path / "b", True)
    found = by_check(preflight(release_site, launch(target=unquantized, draft=None, algorithm="NEXTN"))[1]).get("draft-quantization", [])
    assert [f["severity"] for f in found if "MTP layers" in f["message"]] == ["fail"]
    assert "draft-quantization" not in by_check(preflight(release_site, launch(target=fine, draft=None, algorithm="NEXTN"))[1])


def test_rules_are_registered_units_run_in_order_over_one_launch(monkeypatch):
    """A rule is a function of the frozen Launch; run_rules lists each rule's findings in the order
    the rules were registered, so a new rule is one `@register` more."""
    from dataclasses import FrozenInstanceError

    line = read_launch(["python", "-m", "sglang.launch_server", "--no-such-option"], _options(("--model-path", "store", "one")))
    launch_record = rules.Launch(line, rules.TreeFacts(), Path("/srt"))
    with pytest.raises(FrozenInstanceError):
        launch_record.algorithm = "EAGLE3"  # type: ignore[misc]
    monkeypatch.setattr(rules, "RULES", list(rules.RULES))
    rules.register(lambda launch: iter([rules.finding("info", "extra", f"{len(launch.line.errors)} error(s)", "arguments")]))
    found = rules.run_rules(launch_record)
    assert [f.check for f in found] == ["launch-arguments", "extra"]  # the unknown option, then the rule registered last
    assert found[-1].message == "1 error(s)"


def _every_release() -> list:
    import sglang_releases

    return [pytest.param(v, marks=pytest.mark.integration, id=v) for v in sglang_releases.read_releases()]


NEW_RULES = ("dtype", "dflash-layer-ids", "draft-config-keys")


@pytest.mark.parametrize("version", _every_release())
def test_the_new_rules_stay_silent_on_the_seeds_launch_of_every_release(version):
    """The seed's EAGLE-3 launch is well formed but for what the seed's story says (the hooks, the
    context length): the rules added with issue 36 say nothing of it on any pinned release."""
    import sglang_releases

    _, data = preflight(sglang_releases.site_packages(version), launch("--disable-cuda-graph", "--attention-backend", "fa3"))
    found = by_check(data)
    assert not [check for check in NEW_RULES if check in found]
    assert not [f for f in found.get("draft-quantization", []) if "MTP layers" in f["message"]]
    assert "launch-arguments" not in found and found["context-length"][0]["severity"] == "fail"
