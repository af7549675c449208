"""`eaglepatch diff` and `eaglepatch apply` on copies of the bundled fixtures.

Every test copies ``fixtures/`` into tmp_path first (the fixtures themselves are never
written), and the git tests build real repositories there with the ``git`` binary.
The CLI runs in-process through ``typer.testing.CliRunner``; the patched code runs in a
fresh interpreter (``subprocess``) so fixture modules never leak between tests.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import flat, git, isolate_git, snapshot
from typer.testing import CliRunner

from eaglepatch.cli import app

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "fixtures"
CHECKOUT = FIXTURES / "checkout"

SRT = "python/sglang/srt"
KIMI = f"{SRT}/models/kimi_k25.py"
KIMI_CLASS = "KimiK25ForConditionalGeneration"
HOOKS = ("get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture")

# module -> (class, what is special about the file)
EXOTIC = {
    "exotic_wrapper": "ExoticWrapperForConditionalGeneration",
    "tabs_wrapper": "TabsWrapperForConditionalGeneration",
    "crlf_wrapper": "CrlfWrapperForConditionalGeneration",
    "bom_wrapper": "BomWrapperForConditionalGeneration",
}
BOM = b"\xef\xbb\xbf"

RUNNER = CliRunner()


# --------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def isolated_git(monkeypatch):
    """git (subprocess and GitPython alike) sees no user or system config, and a fixed identity."""
    isolate_git(monkeypatch, columns=200)


def eaglepatch(*args) -> object:
    """The CLI in-process; an unexpected exception is re-raised, not read as an exit code."""
    result = RUNNER.invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def run_python(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout)


def pyflakes(*files: Path) -> str:
    done = run_python("-m", "pyflakes", *map(str, files))
    return done.stdout + done.stderr


def black_check(*files: Path) -> subprocess.CompletedProcess:
    return run_python("-m", "black", "--check", "--diff", "--quiet", *map(str, files))


def module_level_imports(data: bytes) -> set[str]:
    names = set()
    for node in ast.parse(data).body:
        if isinstance(node, ast.ImportFrom):
            names |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


def class_methods(data: bytes, cls: str) -> set[str]:
    for node in ast.parse(data).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    raise AssertionError(f"class {cls} not found")


@pytest.fixture
def plain(tmp_path) -> Path:
    """A copy of the checkout layout, in no git repository."""
    root = tmp_path / "plain"
    shutil.copytree(CHECKOUT, root, symlinks=True)
    probe = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=root, capture_output=True, text=True)
    assert probe.returncode != 0, f"{root} is inside a git work tree; the non-git tests need a folder outside one"
    return root


@pytest.fixture
def repo(tmp_path) -> Path:
    """A git checkout of the fixture tree: `python/sglang/...` at the root, one commit."""
    root = tmp_path / "repo"
    shutil.copytree(CHECKOUT, root, symlinks=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "fixture tree")
    return root


# --------------------------------------------------------------------------- diff


def test_diff_in_git_checkout_is_a_git_patch_and_writes_nothing(repo, tmp_path):
    before = snapshot(repo)
    result = eaglepatch("diff", repo)
    assert result.exit_code == 1, result.output
    patch = result.stdout
    assert patch.startswith(f"diff --git a/{KIMI} b/{KIMI}\n--- a/{KIMI}\n+++ b/{KIMI}\n@@ "), patch[:300]
    assert patch.count("diff --git ") == 1
    body = [line for line in patch.splitlines()[3:] if not line.startswith("@@")]
    assert not [line for line in body if line.startswith("-")], "kimi needs no import, so nothing is removed"
    for hook in HOOKS:
        assert f"+    def {hook}(" in patch

    # diff is a dry run: not one byte written, no file added, git sees a clean tree
    assert snapshot(repo) == before
    assert git(repo, "status", "--porcelain") == ""

    patch_file = tmp_path / "fix.patch"
    patch_file.write_bytes(result.stdout_bytes)
    assert subprocess.run(["git", "apply", "--check", str(patch_file)], cwd=repo, capture_output=True).returncode == 0
    dry = subprocess.run(["patch", "-p1", "--dry-run", "-i", str(patch_file)], cwd=repo, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert snapshot(repo) == before

    # Paths stay relative to the work tree root when PATH is deeper inside it.
    deeper = eaglepatch("diff", repo / SRT)
    assert deeper.exit_code == 1
    assert deeper.stdout == patch

    # The patch is what apply writes: applying it gives the same bytes as `eaglepatch apply`.
    git(repo, "apply", str(patch_file))
    other = tmp_path / "other"
    shutil.copytree(CHECKOUT, other, symlinks=True)
    assert eaglepatch("apply", other).exit_code == 0
    assert (repo / KIMI).read_bytes() == (other / KIMI).read_bytes()


def test_diff_outside_git_is_relative_to_path(plain):
    before = snapshot(plain)
    for path, label in ((plain, KIMI), (plain / SRT, "models/kimi_k25.py")):
        result = eaglepatch("diff", path)
        assert result.exit_code == 1, result.output
        assert result.stdout.startswith(f"diff --git a/{label} b/{label}\n--- a/{label}\n+++ b/{label}\n"), result.stdout[:300]
        dry = subprocess.run(
            ["patch", "-p1", "--dry-run"], input=result.stdout, cwd=path, capture_output=True, text=True
        )
        assert dry.returncode == 0, dry.stdout + dry.stderr
    assert snapshot(plain) == before


def test_diff_exotic_wrappers_apply_with_patch(plain):
    """The CRLF and BOM bytes survive into the patch, so `patch` applies it to the file as it is."""
    for module in EXOTIC:
        result = eaglepatch("diff", plain, "--model", module)
        assert result.exit_code == 1, result.output
        dry = subprocess.run(["patch", "-p1", "--dry-run"], input=result.stdout_bytes, cwd=plain, capture_output=True)
        assert dry.returncode == 0, (module, dry.stdout + dry.stderr)


def test_diff_site_packages_with_symlinked_package_is_relative_to_path(tmp_path):
    copy = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, copy, symlinks=True)
    site = copy / "site-packages"
    assert (site / "sglang").is_symlink()
    result = eaglepatch("diff", site)
    assert result.exit_code == 1, result.output
    label = "sglang/srt/models/kimi_k25.py"
    assert result.stdout.startswith(f"diff --git a/{label} b/{label}\n"), result.stdout.splitlines()[0]


# --------------------------------------------------------------------------- apply (kimi)


def test_apply_in_git_checkout(repo):
    mode = (repo / KIMI).stat().st_mode
    result = eaglepatch("apply", repo)
    assert result.exit_code == 0, result.output
    out = flat(result.output)
    assert f"added to {KIMI_CLASS}" in out
    for hook in HOOKS:
        assert hook in out
    assert "uncommitted" not in out  # the file was clean

    data = (repo / KIMI).read_bytes()
    compile(data, KIMI, "exec")
    assert set(HOOKS) <= class_methods(data, KIMI_CLASS)
    assert (repo / KIMI).stat().st_mode == mode

    # Only the wrapper changed, only by added lines, and nothing was left beside it.
    assert git(repo, "status", "--porcelain", "--untracked-files=all").splitlines() == [f" M {KIMI}"]
    added, deleted, name = git(repo, "diff", "--numstat").split()
    assert (name, deleted) == (KIMI, "0") and int(added) > 0

    assert eaglepatch("check", repo).exit_code == 0

    again = eaglepatch("apply", repo)
    assert again.exit_code == 0
    assert "nothing to do" in again.output.lower()
    assert (repo / KIMI).read_bytes() == data

    nothing = eaglepatch("diff", repo)
    assert nothing.exit_code == 0 and nothing.stdout == ""


def test_patched_files_pass_black_and_pyflakes(plain):
    for module in ("kimi_k25", *EXOTIC):
        assert eaglepatch("apply", plain, "--model", module).exit_code == 0
    models = plain / SRT / "models"
    # tabs_wrapper is left out of black: black would turn its tabs into spaces.
    checked = [models / "kimi_k25.py", models / "exotic_wrapper.py", models / "crlf_wrapper.py", models / "bom_wrapper.py"]
    done = black_check(*checked)
    assert done.returncode == 0, done.stdout + done.stderr
    report = pyflakes(*(models / f"{m}.py" for m in ("kimi_k25", *EXOTIC)))
    assert "undefined name" not in report, report


# --------------------------------------------------------------------------- running the generated code

KIMI_SCRIPT = r'''
import inspect, sys, types
sys.path.insert(0, sys.argv[1])
patched = sys.argv[2] == "patched"
from sglang.srt.models.kimi_k25 import KimiK25ForConditionalGeneration as Wrapper
from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM as Inner
from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner
from sglang.srt.speculative.eagle_worker import EAGLEWorker
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm as Algo
from sglang.srt.utils import nn

N = types.SimpleNamespace
HOOKS = ("get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture")


def make():
    text = N(num_hidden_layers=8, hidden_size=8, vocab_size=32)
    return Wrapper(N(text_config=text, vision_config=None))


def draft():
    return LlamaForCausalLMEagle3(N(num_hidden_layers=1, hidden_size=8, vocab_size=32))


def raises_attribute_error(call, member):
    try:
        call()
    except AttributeError as exc:
        assert member in str(exc), (member, str(exc))
    else:
        raise AssertionError(f"no AttributeError for {member}")


if not patched:
    # The unpatched wrapper kills every EAGLE-3 consumer, one member at a time.
    raises_attribute_error(lambda: ModelRunner(make(), Algo.EAGLE3, [1, 2]), "set_eagle3_layers_to_capture")
    runner = N(model=make(), spec_algorithm=Algo.EAGLE3, eagle_use_aux_hidden_state=True)
    raises_attribute_error(lambda: CudaGraphRunner(runner), "set_eagle3_layers_to_capture")
    target = N(model_runner=ModelRunner(make(), Algo.NONE))
    for algo in ("EAGLE3", "EAGLE"):
        raises_attribute_error(
            lambda: EAGLEWorker(N(speculative_algorithm=algo), target, N(model=draft())), "get_embed_and_head"
        )
    print("OK")
    sys.exit(0)


class Recorder:
    """Stands in for the inner model: records each call and returns a fresh token."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def method(*args, **kwargs):
            token = object()
            self.calls.append((name, args, kwargs, token))
            return token

        return method


def bound(name, args, kwargs):
    """Arguments as the inner method would see them: (name, value) pairs, defaults filled in."""
    b = inspect.signature(getattr(Inner, name)).bind(None, *args, **kwargs)
    b.apply_defaults()
    return list(b.arguments.items())[1:]


E, H = nn.Parameter(32, 8), nn.Parameter(32, 8)
CALLS = [
    ("get_embed_and_head", (), {}),
    ("set_embed_and_head", (E, H), {}),
    ("set_eagle3_layers_to_capture", ([1, 2],), {}),
    ("set_eagle3_layers_to_capture", (), {}),
]

for name, args, kwargs in CALLS:
    assert inspect.signature(getattr(Wrapper, name)) == inspect.signature(getattr(Inner, name)), name
    # 1. through a recording inner: one call, same arguments (the very objects), its result returned
    w = make()
    w.language_model = rec = Recorder()
    out = getattr(w, name)(*args, **kwargs)
    assert len(rec.calls) == 1, rec.calls
    got_name, got_args, got_kwargs, token = rec.calls[0]
    assert got_name == name
    assert out is token
    want, got = bound(name, args, kwargs), bound(name, got_args, got_kwargs)
    assert [k for k, _ in want] == [k for k, _ in got], (want, got)
    assert all(a is b for (_, a), (_, b) in zip(want, got)), (want, got)

    # 2. on the real inner model: same result and same effect as calling it directly
    w, twin = make(), make()
    via = getattr(w, name)(*args, **kwargs)
    direct = getattr(twin.language_model, name)(*args, **kwargs)
    if name == "get_embed_and_head":
        assert via == w.language_model.get_embed_and_head()
        assert via[0] is w.language_model.model.embed_tokens.weight and via[1] is w.language_model.lm_head.weight
    else:
        assert via is None and direct is None
    for attr in ("capture_aux_hidden_states", "layers_to_capture"):
        assert getattr(w.language_model, attr) == getattr(twin.language_model, attr), attr
    assert w.language_model.model.layers_to_capture == twin.language_model.model.layers_to_capture
    if name == "set_embed_and_head":
        assert w.language_model.get_embed_and_head() == (E, H)

    # 3. without an inner model (or one lacking the member): AttributeError naming the member
    for missing in (None, object()):
        w = make()
        w.language_model = missing
        raises_attribute_error(lambda: getattr(w, name)(*args, **kwargs), name)

# The fixture's own EAGLE-3 consumers, with the patched wrapper as the target model.
w = make()
inner = w.language_model
runner = ModelRunner(w, Algo.EAGLE3, [1, 2])
assert inner.capture_aux_hidden_states and inner.layers_to_capture == [2, 3]
CudaGraphRunner(runner)
assert inner.layers_to_capture == [2, 4, 5]  # the default set, re-armed before capture
for algo in ("EAGLE3", "EAGLE"):
    d = draft()
    worker = EAGLEWorker(N(speculative_algorithm=algo), N(model_runner=runner), N(model=d))
    assert d.model.embed_tokens.weight is inner.model.embed_tokens.weight
    assert d.lm_head.weight is inner.lm_head.weight
    assert worker.reshare_embed_and_head() == inner.get_embed_and_head()
    assert worker.target_embed_shape() == inner.model.embed_tokens.weight.shape
print("OK")
'''


def test_generated_kimi_code_forwards_every_consumer_call(tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    shutil.copytree(CHECKOUT, before, symlinks=True)
    shutil.copytree(CHECKOUT, after, symlinks=True)
    assert eaglepatch("apply", after).exit_code == 0
    for root, state in ((before, "unpatched"), (after, "patched")):
        done = run_python("-I", "-B", "-c", KIMI_SCRIPT, str(root / "python"), state)
        assert done.returncode == 0 and done.stdout.strip().endswith("OK"), f"{state}:\n{done.stdout}{done.stderr}"
    assert snapshot(before) == snapshot(CHECKOUT), "the unpatched copy must stay unpatched"


EXOTIC_SCRIPT = r'''
import importlib, inspect, sys, types
sys.path.insert(0, sys.argv[1])
module = importlib.import_module("sglang.srt.models." + sys.argv[2])
Wrapper = module.EntryClass[0]
from sglang.srt.configs.eagle_defaults import DEFAULT_AUX_LAYERS, LayerSpec
from sglang.srt.models.exotic_lm import EmbedAndHead, ExoticForCausalLM as Inner
from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner
from sglang.srt.speculative.eagle_worker import EAGLEWorker
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm as Algo
from sglang.srt.utils import nn

N = types.SimpleNamespace
HOOKS = ("get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture")


def make():
    return Wrapper(N(text_config=N(hidden_size=8, vocab_size=32)))


for name in HOOKS:
    got, want = inspect.signature(getattr(Wrapper, name)), inspect.signature(getattr(Inner, name))
    assert got == want, f"{name}: {got} != {want}"

E, H = nn.Parameter(32, 8), nn.Parameter(32, 8)
spec = LayerSpec(3, "deep")
ids = [1, 2]
CALLS = [
    ("get_embed_and_head", (), {}),
    ("get_embed_and_head", (), {"scale": 0.25, "dtype": "bf16"}),
    ("set_embed_and_head", (E, H), {}),
    ("set_embed_and_head", (E, H, "extra-1", 2), {"tie": True, "source": "draft"}),
    ("set_eagle3_layers_to_capture", (ids,), {}),
    ("set_eagle3_layers_to_capture", (), {}),
    ("set_eagle3_layers_to_capture", (None,), {}),
    ("set_eagle3_layers_to_capture", ((spec, 5), False, 7, 9), {"strict": True, "layout": "mtp"}),
    # positional-only names are free for **kwargs: these must land in the inner's **options
    ("set_embed_and_head", (E, H), {"embed": "kw-embed", "head": "kw-head"}),
    ("set_eagle3_layers_to_capture", (), {"layer_ids": ids}),
]
for name, args, kwargs in CALLS:
    w = make()
    via = getattr(w, name)(*args, **kwargs)
    direct = getattr(w.language_model, name)(*args, **kwargs)
    assert type(via) is type(direct), (name, type(via))
    if name == "get_embed_and_head":
        assert via.received == direct.received == {"scale": kwargs.get("scale", 1.0), "options": {"dtype": "bf16"} if kwargs else {}}
        assert via[0] is w.language_model.embed_tokens.weight and via[1] is w.language_model.lm_head.weight
    else:
        assert via == direct, (name, via, direct)
    if name == "set_embed_and_head":
        assert via["embed"] is E and via["head"] is H
        assert via["extra"] == args[2:] and via["tie"] is kwargs.get("tie", False)
        assert via["options"] == {k: v for k, v in kwargs.items() if k != "tie"}
    if name == "set_eagle3_layers_to_capture":
        # the hook itself turns None into DEFAULT_AUX_LAYERS
        assert via["layer_ids"] is (args[0] if args and args[0] is not None else DEFAULT_AUX_LAYERS)
        if len(args) > 1:
            assert via["capture"] is False and via["more_ids"] == (7, 9)
            assert via["strict"] is True and via["options"] == {"layout": "mtp"}
        else:
            assert via["options"] == kwargs

# Positional-only stays positional-only, keyword-only stays keyword-only.
for call in (
    lambda m: m.set_embed_and_head(embed=E, head=H),
    lambda m: m.get_embed_and_head(0.5),
    lambda m: m.set_eagle3_layers_to_capture(ids, True, 1, strict=True, capture=False),
):
    for target in (make(), make().language_model):
        try:
            call(target)
        except TypeError:
            pass
        else:
            raise AssertionError(f"{type(target).__name__} accepted a call its signature forbids")

for name, args, kwargs in CALLS:
    w = make()
    w.language_model = None
    try:
        getattr(w, name)(*args, **kwargs)
    except AttributeError as exc:
        assert name in str(exc), str(exc)
    else:
        raise AssertionError(f"{name}: no AttributeError without an inner model")

w = make()
inner = w.language_model
runner = ModelRunner(w, Algo.EAGLE3, [1, 2])
assert inner.layers_to_capture == [1, 2]
CudaGraphRunner(runner)
assert inner.layers_to_capture == list(DEFAULT_AUX_LAYERS)
d = LlamaForCausalLMEagle3(N(num_hidden_layers=1, hidden_size=8, vocab_size=32))
EAGLEWorker(N(speculative_algorithm="EAGLE3"), N(model_runner=runner), N(model=d))
assert d.model.embed_tokens.weight is inner.embed_tokens.weight and d.lm_head.weight is inner.lm_head.weight
print("OK")
'''


@pytest.mark.parametrize("module", list(EXOTIC))
def test_exotic_wrapper_apply(plain, module):
    path = plain / SRT / "models" / f"{module}.py"
    original = path.read_bytes()
    assert not {"Sequence", "LayerSpec", "DEFAULT_AUX_LAYERS"} & module_level_imports(original)

    result = eaglepatch("apply", plain, "--model", module)
    assert result.exit_code == 0, result.output
    data = path.read_bytes()
    assert data != original
    compile(data, str(path), "exec")
    assert set(HOOKS) <= class_methods(data, EXOTIC[module])

    # The file keeps its own conventions.
    if module == "bom_wrapper":
        assert data.startswith(BOM) and data.count(BOM) == 1
    else:
        assert not data.startswith(BOM)
    if module == "crlf_wrapper":
        assert data.count(b"\r\n") == data.count(b"\n") == data.count(b"\r") > original.count(b"\r\n")
    else:
        assert b"\r" not in data
    lines = data.decode("utf-8-sig").splitlines()
    indented = [line for line in lines if line[:1] in (" ", "\t")]
    if module == "tabs_wrapper":
        assert not [line for line in indented if line.startswith(" ")], "a space-indented line in a tab file"
        start = lines.index("\tdef get_embed_and_head(")
        assert lines[start + 1].startswith("\t\tself, /")
    else:
        assert not [line for line in indented if line.startswith("\t")], "a tab-indented line in a space file"
        assert "    def get_embed_and_head(" in lines

    # Only additions, except the import lines the signatures need.
    new_lines = data.splitlines(keepends=True)
    old_kept = [line for line in original.splitlines(keepends=True) if not line.lstrip(BOM).startswith(b"from ")]
    it = iter(new_lines)
    assert all(any(line == new for new in it) for line in old_kept), "an original line was changed or dropped"

    assert {"Sequence", "LayerSpec", "DEFAULT_AUX_LAYERS", "Any", "EmbedAndHead"} <= module_level_imports(data)
    report = pyflakes(path)
    assert report.strip() == "", report

    done = run_python("-I", "-B", "-c", EXOTIC_SCRIPT, str(plain / "python"), module)
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stdout + done.stderr

    again = eaglepatch("apply", plain, "--model", module)
    assert again.exit_code == 0 and "nothing to do" in again.output.lower()
    assert path.read_bytes() == data
    assert eaglepatch("check", plain, "--model", module).exit_code == 0


# --------------------------------------------------------------------------- apply --commit, dirty files


def test_apply_commit_commits_only_the_wrapper(repo):
    head = git(repo, "rev-parse", "HEAD").strip()
    # Unrelated work in progress that must stay out of the commit.
    staged = f"{SRT}/models/llava_like.py"
    with open(repo / staged, "a", encoding="utf-8") as fh:
        fh.write("# staged, unrelated\n")
    git(repo, "add", staged)
    (repo / "notes.txt").write_text("untracked\n", encoding="utf-8")

    result = eaglepatch("apply", repo, "--commit")
    assert result.exit_code == 0, result.output
    sha = git(repo, "rev-parse", "HEAD").strip()
    assert sha != head and git(repo, "rev-parse", "HEAD^").strip() == head
    assert f"committed {sha[:12]}" in flat(result.output)
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == [KIMI]
    message = git(repo, "log", "-1", "--format=%B")
    for hook in HOOKS:
        assert hook in message
    assert KIMI_CLASS in message

    # The commit holds the patched file, and the unrelated changes are where they were.
    assert git(repo, "show", f"HEAD:{KIMI}").encode() == (repo / KIMI).read_bytes()
    assert git(repo, "diff", "--cached", "--name-only").split() == [staged]
    assert git(repo, "status", "--porcelain", "--", KIMI) == ""
    assert (repo / "notes.txt").exists()


def test_apply_notes_uncommitted_changes_in_the_wrapper(repo):
    local = "# a local edit, not committed\n"
    with open(repo / KIMI, "a", encoding="utf-8") as fh:
        fh.write(local)
    result = eaglepatch("apply", repo)
    assert result.exit_code == 0, result.output
    out = flat(result.output)
    assert f"{KIMI.removeprefix(SRT + '/')} already had uncommitted changes" in out, out
    text = (repo / KIMI).read_text(encoding="utf-8")
    assert text.endswith(local)
    assert all(f"def {hook}(" in text for hook in HOOKS)


# --------------------------------------------------------------------------- races


def test_file_changed_between_planning_and_writing_is_left_alone(plain):
    from eaglepatch.errors import EaglepatchError
    from eaglepatch.rewrite.edits import build_edits
    from eaglepatch.rewrite.write import write_edit
    from eaglepatch.run import analyze

    analysis = analyze(plain, ["exotic_wrapper"])
    built = build_edits(analysis.cache, analysis.tree, analysis.plans)
    # build_edits returns the edits, or (edits, per-file errors)
    edits, errors = built if isinstance(built, tuple) else (built, [])
    assert not errors
    edits = [e for e in edits if e.changed]
    assert len(edits) == 1
    edit = edits[0]
    path = plain / SRT / "models" / "exotic_wrapper.py"
    assert edit.path.resolve() == path.resolve()

    changed = edit.original + b"\n# edited by someone else meanwhile\n"
    path.write_bytes(changed)
    with pytest.raises(EaglepatchError, match="changed on disk"):
        write_edit(edit, analysis.tree.srt)
    assert path.read_bytes() == changed
    assert not list(path.parent.glob(".*eaglepatch-tmp")), "a temporary file was left behind"

    result = eaglepatch("apply", plain, "--model", "exotic_wrapper")
    assert result.exit_code == 0, result.output
    data = path.read_bytes()
    assert data.endswith(b"# edited by someone else meanwhile\n")
    assert set(HOOKS) <= class_methods(data, EXOTIC["exotic_wrapper"])


# --------------------------------------------------------------------------- regressions: aliases, shadowed names, long merged imports, symlinked packages


def _exotic_variant(root: Path, lm=(), wrapper=()) -> Path:
    """Edit exotic_lm.py / exotic_wrapper.py in a copy by exact string replacement."""
    models = root / SRT / "models"
    for name, subs in (("exotic_lm.py", lm), ("exotic_wrapper.py", wrapper)):
        path = models / name
        text = path.read_text(encoding="utf-8")
        for old, new in subs:
            assert old in text, (name, old)
            text = text.replace(old, new)
        path.write_text(text, encoding="utf-8")
    return models / "exotic_wrapper.py"


@pytest.mark.parametrize(
    "lm",
    [
        pytest.param(
            [
                ("from typing import Any, Dict, Optional, Sequence, Union", "from typing import Any, Dict, Optional, Union\nfrom typing import Sequence as Seq"),
                ("Optional[Sequence[", "Optional[Seq["),
            ],
            id="from-import-as",
        ),
        pytest.param(
            [
                ("from sglang.srt.utils import nn\n", "from sglang.srt.utils import nn\nfrom sglang.srt.configs import eagle_defaults as ed\n"),
                ("] = DEFAULT_AUX_LAYERS,", "] = ed.DEFAULT_AUX_LAYERS,"),
            ],
            id="module-alias",
        ),
    ],
)
def test_aliased_import_in_inner_signature(plain, lm):
    path = _exotic_variant(plain, lm=lm)
    assert eaglepatch("apply", plain, "--model", "exotic_wrapper").exit_code == 0
    report = pyflakes(path)
    assert "undefined name" not in report, report


def test_merged_import_line_is_black_formatted(plain):
    path = _exotic_variant(
        plain,
        lm=[
            ("from typing import Any, Dict, Optional, Sequence, Union\n", "from typing import Any, Dict, Optional, Sequence, Union\n\nDEFAULT_HEAD_SCALE_FACTOR = 1.0\n"),
            ("scale: float = 1.0", "scale: float = DEFAULT_HEAD_SCALE_FACTOR"),
        ],
    )
    assert black_check(path).returncode == 0  # the variant starts black-clean
    assert eaglepatch("apply", plain, "--model", "exotic_wrapper").exit_code == 0
    done = black_check(path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_default_name_shadowed_in_wrapper_module_keeps_inner_default(plain):
    _exotic_variant(plain, wrapper=[("from sglang.srt.utils import nn\n", "from sglang.srt.utils import nn\n\nDEFAULT_AUX_LAYERS = (0,)\n")])
    assert eaglepatch("apply", plain, "--model", "exotic_wrapper").exit_code == 0
    script = (
        "import sys, types; sys.path.insert(0, sys.argv[1])\n"
        "from sglang.srt.models.exotic_wrapper import ExoticWrapperForConditionalGeneration as W\n"
        "w = W(types.SimpleNamespace(text_config=types.SimpleNamespace()))\n"
        "print(list(w.set_eagle3_layers_to_capture()['layer_ids']))\n"
    )
    done = run_python("-I", "-B", "-c", script, str(plain / "python"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[2, 4, 6]"  # what calling the inner model without arguments gives
