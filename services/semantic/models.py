"""Embedding models behind one small protocol, loaded from local files only.

``SemanticModel.embed(texts)`` returns one unit-length float32 row per text
(a zero row for a text with no known token). Models:

- ``wordllama`` (default): the static token embeddings that ship *inside* the
  ``wordllama`` wheel (32,000 x 256, float16). ``WordLlama.load()`` would look
  for its tokenizer in the wrong folder and try to download it, and its
  inference class copies the weights to float32 (+32 MB), so this loader
  reads the packaged files itself: the tokenizer file and the safetensors
  tensor memory-mapped from the wheel (pages the queries touch are shared
  with the page cache), mean-pooled in numpy. Token ids come from
  ``bpe.CompactBpe`` (the same ids as ``tokenizers``, in ~0.5 MiB instead of
  8-12 MiB held all day); work of many texts at once (a cold build's
  builders, a burst of edits) borrows ``tokenizers.Tokenizer`` for its length
  (``bulk_embedding``), which is ~8x faster on them.
- ``fastembed:<folder>`` and ``sentence-transformers:<folder>``: a model the
  user already has on disk. Loaded with the library's offline switches; a
  missing library or folder is an error naming the setting, never a download.

``load_model(setting)`` returns ``None`` for ``lexical`` (keyword overlap, no
model).
"""

from __future__ import annotations

import json
import logging
import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .bpe import CompactBpe, UnsupportedTokenizer

log = logging.getLogger(__name__)

WORDLLAMA = "wordllama"
LEXICAL = "lexical"
MAX_TOKENS = 512  # tokens pooled per text: a memory's opening carries its topic
BPE_CACHE_WORDS = 0  # the tokenizers library's word cache (see WordLlamaModel._load_library)
RELEASE_PAGES_EVERY = 256  # single queries embedded between two WordLlamaModel.release_pages (batches: after each)
MAX_CHARS = 4 * MAX_TOKENS  # characters tokenised per text (about MAX_TOKENS tokens of English)
_WORDLLAMA_TOKENIZER = "tokenizers/l2_supercat_tokenizer_config.json"
_WORDLLAMA_WEIGHTS = "weights/l2_supercat_256.safetensors"
_WORDLLAMA_TENSOR = "embedding.weight"


class ModelError(ValueError):
    """The configured model cannot be loaded; the message names the setting and why."""


class SemanticModel(Protocol):
    """Anything that turns texts into unit-length vectors of a fixed size."""

    name: str  # stable: part of the cache key (a different name rebuilds the cache)
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def _normalise(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: np.ndarray = (rows / norms).astype(np.float32, copy=False)  # numpy types ndarray arithmetic as Any
    return unit


def _safetensors_memmap(path: Path, tensor: str) -> np.ndarray:
    """One float16 tensor of a safetensors file as a read-only memory map (no copy)."""
    with open(path, "rb") as handle:
        header_len = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(header_len))
    meta = header[tensor]
    if meta.get("dtype") != "F16":
        raise ModelError(f"{path}: tensor {tensor} is {meta.get('dtype')}, expected F16")
    start, end = meta["data_offsets"]
    rows, cols = meta["shape"]
    if end - start != rows * cols * 2:
        raise ModelError(f"{path}: tensor {tensor} has an unexpected size")
    return np.memmap(path, dtype=np.float16, mode="r", offset=8 + header_len + start, shape=(rows, cols))


class WordLlamaModel:
    """WordLlama's packaged static embeddings, mean-pooled (see module doc)."""

    name = "wordllama-l2-supercat-256"

    def __init__(self, package_dir: Path | None = None) -> None:
        if package_dir is None:
            try:
                import importlib.util

                spec = importlib.util.find_spec("wordllama")
            except (ImportError, ValueError):
                spec = None
            if spec is None or not spec.origin:
                raise ModelError("semantic.model 'wordllama': the wordllama package is not installed")
            package_dir = Path(spec.origin).parent
        tokenizer_path = package_dir / _WORDLLAMA_TOKENIZER
        weights_path = package_dir / _WORDLLAMA_WEIGHTS
        for path in (tokenizer_path, weights_path):
            if not path.is_file():
                raise ModelError(f"semantic.model 'wordllama': {path} is missing from the installed package")
        try:
            self.encoder = CompactBpe.from_file(tokenizer_path)
        except (UnsupportedTokenizer, OSError, ValueError, KeyError) as exc:
            raise ModelError(f"semantic.model 'wordllama': cannot read its tokenizer: {exc}") from exc
        self._tokenizer_path = tokenizer_path
        self._library: Any = None  # tokenizers.Tokenizer while bulk work (or a builder) holds it
        self._bulk_depth = 0
        self._library_held = False
        self.weights = _safetensors_memmap(weights_path, _WORDLLAMA_TENSOR)
        self.dim = int(self.weights.shape[1])
        self._embedded_since_release = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        # a memory's opening carries its topic: cut long texts before tokenising (bounded work and memory)
        cut = [t[:MAX_CHARS] for t in texts]
        library = self._library  # read once: bulk work on another thread may let go of it meanwhile
        if library is not None:
            token_ids = [encoding.ids for encoding in library.encode_batch(cut, add_special_tokens=False)]
        else:
            token_ids = [self.encoder.encode(text) for text in cut]
        weights = self.weights
        for row, ids in enumerate(token_ids):
            ids = ids[:MAX_TOKENS]
            if ids:
                out[row] = weights[np.asarray(ids, dtype=np.int64)].astype(np.float32).mean(axis=0)
        self._embedded_since_release += len(texts)
        if len(texts) > 16 or self._embedded_since_release >= RELEASE_PAGES_EVERY:
            self.release_pages()
        return _normalise(out)

    @contextmanager
    def bulk(self) -> Iterator[None]:
        """Tokenise with ``tokenizers.Tokenizer`` until the block ends (many texts; see the module doc).

        Loading it takes ~0.07 s and it holds 8-12 MiB, so it is let go afterwards unless
        ``hold_library`` kept it (a builder process, which does nothing else). Without the
        package the block runs with the compact encoder: the same ids, only slower.
        """
        self._bulk_depth += 1
        try:
            if self._library is None:
                self._library = self._load_library()
            yield
        finally:
            self._bulk_depth -= 1
            if not self._bulk_depth and not self._library_held:
                self._library = None

    def hold_library(self) -> None:
        """Keep ``tokenizers.Tokenizer`` for the life of this process (a builder: bulk work only)."""
        self._library = self._library or self._load_library()
        self._library_held = self._library is not None

    def _load_library(self) -> Any:
        try:
            from tokenizers import Tokenizer
        except ImportError:  # pragma: no cover - installed with the project
            return None
        tokenizer = Tokenizer.from_file(str(self._tokenizer_path))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        # The BPE word cache grows with every new word (~60 MB after 10,000 memories, measured) and
        # is not needed: static embeddings tokenise each memory once. Private API in tokenizers 0.2x.
        resize = getattr(tokenizer.model, "_resize_cache", None)
        if callable(resize):
            resize(BPE_CACHE_WORDS)
        return tokenizer

    def release_pages(self) -> None:
        """Drop the weight pages this process has touched from its resident set (issue 16).

        The 16 MiB table is a read-only file map: each token row read makes its page
        resident, and the intent classifier's examples alone touched 6.9 MiB at the
        daemon's first query (RSS, file-backed). ``MADV_DONTNEED`` gives them back; a
        later read faults the page in again from the page cache (microseconds).
        """
        self._embedded_since_release = 0
        mapped = getattr(self.weights, "_mmap", None)
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if mapped is not None and advice is not None and hasattr(mapped, "madvise"):
            try:
                mapped.madvise(advice)
            except (OSError, ValueError) as exc:  # pragma: no cover - a closed map or an odd platform
                log.debug("madvise on the wordllama weights failed: %s", exc)


class SentenceTransformersModel:
    """A sentence-transformers model from a local folder (offline: never downloads)."""

    def __init__(self, folder: Path) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ModelError(
                "semantic.model 'sentence-transformers:...' needs the sentence-transformers "
                "package (pip install sentence-transformers)"
            ) from exc
        self._model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
        self.dim = int(self._model.get_sentence_embedding_dimension())
        self.name = f"sentence-transformers:{folder.name}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        rows = np.asarray(self._model.encode(list(texts), batch_size=64, show_progress_bar=False), dtype=np.float32)
        return _normalise(rows)


class FastEmbedModel:
    """A fastembed (ONNX) model from a local folder (offline: never downloads)."""

    def __init__(self, folder: Path) -> None:
        try:
            from fastembed import TextEmbedding
        except ImportError as exc:
            raise ModelError(
                "semantic.model 'fastembed:...' needs the fastembed package (pip install fastembed)"
            ) from exc
        self._model = TextEmbedding(model_name=folder.name, specific_model_path=str(folder), local_files_only=True)
        probe = np.asarray(next(iter(self._model.embed(["probe"]))), dtype=np.float32)
        self.dim = int(probe.shape[0])
        self.name = f"fastembed:{folder.name}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalise(np.asarray(list(self._model.embed(list(texts))), dtype=np.float32))


@lru_cache(maxsize=1)
def _shared_wordllama() -> WordLlamaModel:
    """One WordLlama per process: it is read-only, and every engine (tests open many) would load it again."""
    return WordLlamaModel()


_LOCAL: dict[str, Callable[[Path], SemanticModel]] = {
    "fastembed": FastEmbedModel,
    "sentence-transformers": SentenceTransformersModel,
}


BULK_TEXTS = 64  # texts embedded at once from which bulk_embedding borrows the tokenizers library


def bulk_embedding(model: object, texts: int) -> AbstractContextManager[None]:
    """``model.bulk()`` for ``texts`` at or above ``BULK_TEXTS`` when the model has one; else nothing to do.

    Below that the compact encoder's ~1 ms a long text costs less than loading the library.
    """
    bulk = getattr(model, "bulk", None)
    return bulk() if callable(bulk) and texts >= BULK_TEXTS else nullcontext()


def load_model(setting: object) -> SemanticModel | None:
    """The model named by ``semantic.model``; ``None`` for ``lexical``. Raises ``ModelError``."""
    value = str(setting if setting is not None else WORDLLAMA).strip()
    if value.lower() == LEXICAL:
        return None
    if value.lower() == WORDLLAMA:
        return _shared_wordllama()
    kind, sep, location = value.partition(":")
    loader = _LOCAL.get(kind.strip().lower())
    if not sep or loader is None:
        raise ModelError(
            f"semantic.model {value!r} is not one of: wordllama, lexical, "
            "fastembed:<folder>, sentence-transformers:<folder>"
        )
    folder = Path(location.strip()).expanduser()
    if not folder.is_dir():
        raise ModelError(
            f"semantic.model {value!r}: folder {folder} does not exist "
            "(local models load from disk only; nothing is downloaded)"
        )
    try:
        return loader(folder)
    except ModelError:
        raise
    except Exception as exc:  # a broken local model folder: say so instead of crashing the engine
        raise ModelError(f"semantic.model {value!r}: could not load the model from {folder}: {exc}") from exc
