"""The compact BPE encoder (services/semantic/bpe.py) against the tokenizers library, and where each is used."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_DATA, shared_texts
from ctxos.services.semantic import WordLlamaModel, load_model
from ctxos.services.semantic.bpe import CompactBpe, UnsupportedTokenizer
from ctxos.services.semantic.models import BULK_TEXTS, MAX_CHARS, ModelError, bulk_embedding
from daemon_helpers import daemon_factory, memory_text  # noqa: F401  (daemon_factory is a fixture)

tokenizers = pytest.importorskip("tokenizers")

ODD_TEXTS = [
    "",
    " ",
    "   ",
    "a",
    " a",
    "a ",
    "a  b   c",
    "\t\n  x\n\n",
    "<s>",
    "x<s>y</s>z",
    "</s></s><unk>",
    " <s> spaced </s> ",
    "<s >not special<0x41>",
    "héllo wörld, naïve café",
    "日本語のテキストと中文",
    "emoji 😀👍🏽 and a flag 🇫🇷",
    "combining e\u0301 and zero\u200bwidth",
    "\u2581\u2581 already \u2581 marked \u2581",
    "a\u00a0b\u3000c",
    "\x00\x01\x7f control",
    "x" * 3000,
    "path/to/some_file.py:42 --flag=value && echo $HOME",
    "def f(x):\n    return {'a': [1, 2.5e-3]}\n",
]


def _tokenizer_path() -> Path:
    model = load_model("wordllama")
    assert isinstance(model, WordLlamaModel)
    return model._tokenizer_path


@pytest.fixture(scope="module")
def encoders() -> tuple[CompactBpe, object]:
    path = _tokenizer_path()
    library = tokenizers.Tokenizer.from_file(str(path))
    library.no_padding()
    library.no_truncation()
    return CompactBpe.from_file(path), library


def _library_ids(library: object, text: str) -> list[int]:
    return list(library.encode(text, add_special_tokens=False).ids)  # type: ignore[attr-defined]


def test_ids_equal_the_library_on_the_shared_corpora(encoders) -> None:
    compact, library = encoders
    texts = shared_texts(per_corpus=400)
    if len(texts) < 100:
        pytest.skip(f"the shared corpora are not under {SHARED_DATA}")
    compared = 0
    for text in texts:
        for piece in (text[:MAX_CHARS], text):  # what embed tokenises, and whole files (longer words, more merges)
            assert compact.encode(piece) == _library_ids(library, piece), piece[:200]
            compared += 1
    assert compared >= 200


@pytest.mark.parametrize("text", ODD_TEXTS, ids=range(len(ODD_TEXTS)))
def test_ids_equal_the_library_on_odd_text(encoders, text: str) -> None:
    compact, library = encoders
    assert compact.encode(text) == _library_ids(library, text)


def test_special_tokens_and_unknown_characters(encoders) -> None:
    compact, _ = encoders
    assert compact.encode("<s>") == [1] and compact.encode("</s>") == [2] and compact.encode("<unk>") == [0]
    # a character the vocabulary lacks becomes its UTF-8 bytes' tokens (<0xF0> is id 243: ids are byte + 3)
    assert compact.encode("\U0001f9ea")[-4:] == [0xF0 + 3, 0x9F + 3, 0xA7 + 3, 0xAA + 3]
    # a lone surrogate (JSON allows "\ud800") is its three bytes; the library raises on it
    assert compact.encode("\ud800")[-3:] == [0xED + 3, 0xA0 + 3, 0x80 + 3]


def test_a_tokenizer_it_cannot_reproduce_is_refused_naming_the_file(tmp_path: Path) -> None:
    spec = json.loads(_tokenizer_path().read_text(encoding="utf-8"))
    cases = {
        "pre_tokenizer": ({"type": "Whitespace"}, "pre-tokenizer"),
        "normalizer": ({"type": "NFKC"}, "normalizer"),
    }
    for key, (value, reason) in cases.items():
        odd = dict(spec, **{key: value})
        path = tmp_path / f"{key}.json"
        path.write_text(json.dumps(odd), encoding="utf-8")
        with pytest.raises(UnsupportedTokenizer) as raised:
            CompactBpe.from_file(path)
        assert str(path) in str(raised.value) and reason in str(raised.value)
    # a package folder whose tokenizer is refused: the model says which setting failed and why
    package = tmp_path / "wordllama"
    (package / "tokenizers").mkdir(parents=True)
    (package / "weights").mkdir()
    real = _tokenizer_path().parents[1]
    (package / "weights" / "l2_supercat_256.safetensors").symlink_to(real / "weights" / "l2_supercat_256.safetensors")
    (package / "tokenizers" / "l2_supercat_tokenizer_config.json").write_text(
        json.dumps(dict(spec, pre_tokenizer={"type": "Whitespace"})), encoding="utf-8"
    )
    with pytest.raises(ModelError, match="semantic.model 'wordllama': cannot read its tokenizer: .*pre-tokenizer"):
        WordLlamaModel(package)


def test_bulk_work_borrows_the_library_and_gives_the_same_rows() -> None:
    model = WordLlamaModel()
    texts = shared_texts(per_corpus=40)[:BULK_TEXTS] or ODD_TEXTS
    compact_rows = model.embed(texts)
    assert model._library is None
    with bulk_embedding(model, len(texts)):
        assert model._library is not None
        library_rows = model.embed(texts)
    assert model._library is None  # let go after the block
    assert np.array_equal(compact_rows, library_rows)
    with bulk_embedding(model, BULK_TEXTS - 1):
        assert model._library is None  # a few texts: the compact encoder, no library loaded
    model.hold_library()
    with bulk_embedding(model, BULK_TEXTS):
        pass
    assert model._library is not None  # a builder keeps it


def test_the_daemon_answers_and_saves_without_the_tokenizers_library(make_workspace, daemon_factory) -> None:  # noqa: F811
    """The steady state this encoder is for: queries and single saves embed in the daemon without the library."""
    files = {
        f"03-projects/p{i}.md": memory_text(
            f"p{i}", f"Project {i} ships the parser rewrite in week {i}.", l0=f"Project {i}"
        )
        for i in range(5)
    }
    root = make_workspace(files)
    daemon = daemon_factory(root)
    with daemon.client() as client:
        answer = client.call("get_context", {"query": "when does the parser rewrite ship"})
        assert any(s["path"].startswith("03-projects/") for s in answer["selected"])
        saved = client.call(
            "save_memory",
            {"type": "decision", "l0": "Use the compact encoder", "content": "Token ids without the library."},
        )
        assert saved.get("path"), saved
        client.call("get_context", {"query": "compact encoder token ids"})
    maps = Path(f"/proc/{daemon.proc.pid}/maps").read_text(encoding="utf-8")
    assert "tokenizers" not in maps  # neither its code nor its 8-12 MiB of tables


def test_builders_fork_with_the_library_held() -> None:
    """The cold build's forkserver preloads the model with the library held, so builders tokenise at its speed."""
    import subprocess
    import sys

    code = (
        "import ctxos.services.builder_preload\n"
        "from ctxos.services.semantic import load_model\n"
        "model = load_model('wordllama')\n"
        "print(model._library is not None, model._library_held)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["True", "True"], out.stderr
