"""The offline semantic signal (issue 13): the packaged WordLlama model, the embedding cache in the
state dir, incremental updates, model switches, vector candidates and what simulate explains."""

from __future__ import annotations

import json
import math
import socket
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import write_files
from ctxos.services.engine import Engine
from ctxos.services.semantic import ModelError, WordLlamaModel, load_model, quantized
from ctxos.services.semantic.vectors import CACHE_FOLDER
from ctxos.services.workspace import state_dir

FILES = {
    "05-resources/car-battery.md": """\
        ---
        id: car-battery
        l0: The automobile would not start because the battery was flat
        ---
        This morning the vehicle refused to start; a jump start from a neighbour fixed it.
        """,
    "05-resources/cake.md": """\
        ---
        id: cake
        l0: Chocolate birthday cake recipe
        ---
        Mix flour, cocoa, sugar and eggs; bake at 180 degrees for forty minutes.
        """,
    "05-resources/postgres.md": """\
        ---
        id: postgres
        l0: Postgres connection pool sizing
        ---
        Twice the CPU count; the database chokes beyond 50 connections.
        """,
}


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a network connection fails the test (nothing may be downloaded)."""

    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def _cache_files(root):
    folder = state_dir(root) / CACHE_FOLDER
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_wordllama_loads_from_the_wheel_without_network(no_network):
    model = WordLlamaModel()  # a fresh instance: really reads the packaged files
    rows = model.embed(["my truck broke down", "the automobile failed to start", "a recipe for cake", ""])
    assert rows.shape == (4, 256) and rows.dtype == np.float32
    assert np.allclose(np.linalg.norm(rows[:3], axis=1), 1.0, atol=1e-4)
    assert not rows[3].any()  # no token: a zero row, not NaN
    assert rows[0] @ rows[1] > rows[0] @ rows[2]  # paraphrase nearer than an unrelated text
    assert isinstance(model.weights, np.memmap)  # the weights stay a map of the wheel's file (no copy)


def _resident_kib(path_part: str, address: int | None = None) -> int:
    """Resident KiB of this process's mappings of files whose path contains ``path_part`` (Linux).

    With ``address``, only the mapping that holds it: the shared model of earlier tests in the
    same process (queries embed single texts, whose pages stay until a release) maps the file too.
    """
    total, current, inside = 0, "", True
    with open("/proc/self/smaps", encoding="utf-8") as smaps:
        for line in smaps:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5:
                current = head[5] if len(head) > 5 else ""
                start, end = (int(part, 16) for part in head[0].split("-"))
                inside = address is None or start <= address < end
            elif line.startswith("Rss:") and path_part in current and inside:
                total += int(head[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads /proc/self/smaps (Linux)")
def test_a_batch_embedding_gives_the_weight_pages_it_touched_back():
    """Issue 16: the weight table is a file map; a batch's rows would stay in the daemon's RSS."""
    model = WordLlamaModel()
    texts = [f"note {i}: deploy the cluster, rotate keys, {i * 7} tickets and a flaky test" for i in range(40)]
    mapped = model.weights.ctypes.data  # this instance's own map of the weights file
    first = model.embed(texts[:1])  # one text: its few pages stay mapped until the next release
    assert _resident_kib("l2_supercat_256.safetensors", mapped) > 0
    vectors = model.embed(texts)  # a batch: the pages it touched are released after it
    assert _resident_kib("l2_supercat_256.safetensors", mapped) == 0
    again = model.embed(texts[:1])  # read back from the page cache: same vector
    assert np.allclose(first, again) and np.allclose(vectors[0], first[0])


def test_model_settings_and_errors(tmp_path):
    assert load_model("lexical") is None
    assert load_model("wordllama") is load_model(" WordLlama ")  # one shared instance per process
    with pytest.raises(ModelError, match="not one of"):
        load_model("word2vec")
    with pytest.raises(ModelError, match="does not exist"):
        load_model(f"fastembed:{tmp_path / 'missing'}")


@pytest.mark.parametrize(
    "kind,module", [("fastembed", "fastembed"), ("sentence-transformers", "sentence_transformers")]
)
def test_local_model_folder(tmp_path, kind, module):
    """A local model loads from a folder only. Building a real tiny model needs the library (and for
    sentence-transformers, torch), which this environment does not install; then the error must say so."""
    folder = tmp_path / "model"
    folder.mkdir()
    try:
        __import__(module)
    except ImportError:
        with pytest.raises(ModelError, match=f"needs the {module.replace('_', '-')} package|pip install"):
            load_model(f"{kind}:{folder}")
        pytest.skip(f"{module} is not installed here; only the error path is tested")
    with pytest.raises(ModelError, match="could not load"):
        load_model(f"{kind}:{folder}")  # an empty folder is not a model, and nothing is downloaded


def test_embeddings_cached_in_state_dir_and_updated_incrementally(make_workspace, monkeypatch, tmp_path):
    state = tmp_path / "elsewhere"
    monkeypatch.setenv("CTXOS_STATE_DIR", str(state))
    root = make_workspace(FILES)
    engine = Engine(root)
    engine.load()
    assert engine.vectors is not None and len(engine.vectors) == len(engine.store)
    first = engine.vectors.embedded
    assert first == len(engine.store)
    assert _cache_files(root) == ["wordllama-l2-supercat-256.json", "wordllama-l2-supercat-256.npy"]
    assert (state / CACHE_FOLDER).is_dir() and not (root / ".ctxos" / CACHE_FOLDER).exists()
    meta = json.loads((state / CACHE_FOLDER / "wordllama-l2-supercat-256.json").read_text())
    assert meta["model"] == "wordllama-l2-supercat-256" and len(meta["checksums"]) == len(engine.store)
    assert np.load(state / CACHE_FOLDER / "wordllama-l2-supercat-256.npy").dtype == np.float16
    engine.close()

    again = Engine(root)
    again.load()
    assert again.vectors.embedded == 0  # everything came from the cache
    write_files(root, {"05-resources/cake.md": FILES["05-resources/cake.md"].replace("Chocolate", "Lemon")})
    again.apply_changes([root / "05-resources/cake.md"])
    assert again.vectors.embedded == 1  # only the edited memory
    (root / "05-resources/postgres.md").unlink()
    again.apply_changes([root / "05-resources/postgres.md"])
    assert len(again.vectors) == len(again.store) == 2
    meta = json.loads((state / CACHE_FOLDER / "wordllama-l2-supercat-256.json").read_text())
    assert len(meta["checksums"]) == 3  # single changes are written in batches ...
    live = sorted(memory.checksum for memory in again.store.memories.values())
    again.close()  # ... and when the engine closes
    meta = json.loads((state / CACHE_FOLDER / "wordllama-l2-supercat-256.json").read_text())
    assert sorted(meta["checksums"]) == live  # the edited row's new checksum, the removed row's gone
    third = Engine(root)
    third.load()
    assert third.vectors.embedded == 0  # the edit came back from the cache
    third.close()


def test_model_switch_rebuilds_and_switching_back_reuses(make_workspace):
    root = make_workspace(FILES)
    engine = Engine(root)
    engine.load()
    (root / "_config.yaml").write_text("semantic:\n  model: lexical\n")
    engine.reload_config()
    assert engine.vectors is None and engine.semantic.name == "keyword-overlap"
    result = engine.execute_context_query("automobile battery", 500, record_access=False)
    assert result.semantic_model == "keyword-overlap"
    (root / "_config.yaml").write_text("semantic:\n  model: wordllama\n")
    engine.reload_config()
    assert engine.vectors is not None and engine.vectors.embedded == 0 and len(engine.vectors) == 3
    (root / "_config.yaml").write_text("semantic:\n  model: fastembed:/nowhere/at/all\n")
    engine.reload_config()
    assert engine.vectors is None and any("does not exist" in p for p in engine.problems)
    assert engine.execute_context_query("cake", 500, record_access=False).selected  # still serving
    engine.close()


def test_a_memory_sharing_no_word_is_found_by_the_vector_candidates(make_workspace):
    root = make_workspace(FILES)
    engine = Engine(root)
    engine.load()
    scored = engine.score_query("my truck broke down")
    by_id = {c.memory.id: c for c in scored.candidates}
    assert "car-battery" in by_id and by_id["car-battery"].bm25_raw == 0
    assert "vector" in by_id["car-battery"].sources
    assert scored.candidates[0].memory.id == "car-battery"
    result = engine.execute_context_query("my truck broke down", 800, record_access=False)
    top = result.selected[0]
    assert top.id == "car-battery" and "vector" in top.sources and top.shares["semantic"] > 0
    assert result.semantic_model == "wordllama-l2-supercat-256"
    assert "→" in result.intent_reason
    engine.close()


def test_similarity_is_the_cosine_around_the_rows_mean_and_follows_changes(make_workspace):
    """Centred cosines equal the textbook formula on the real rows, before and after an edit and a removal;
    free rows (left by a removal) never come back from ``nearest``."""
    root = make_workspace(FILES)
    engine = Engine(root)
    engine.load()
    vectors = engine.vectors

    def expected(query):
        codes, scale, ids, _ = vectors._state
        matrix = quantized.rows_of(codes, scale)
        live = {mid: matrix[row] for row, mid in enumerate(ids) if mid is not None}
        mean = np.mean(list(live.values()), axis=0)
        q = query - mean
        return {mid: float((m - mean) @ q / (np.linalg.norm(m - mean) * np.linalg.norm(q))) for mid, m in live.items()}

    query = vectors.embed_query("my truck broke down")
    for step in ("loaded", "edited", "removed"):
        got = vectors.similarities(query, ["car-battery", "cake", "postgres", "unknown"])
        want = expected(query)
        assert set(got) == set(want), step
        assert all(abs(got[m] - want[m]) < 1e-4 for m in want), step
        nearest = vectors.nearest(query, 10)
        assert [m for m, _ in nearest] == sorted(want, key=lambda m: -want[m]), step
        again = vectors.nearest(query, 10)  # kept for this state: equal, in a list of the caller's own
        assert again == nearest and again is not nearest, step
        if step == "loaded":
            write_files(root, {"05-resources/cake.md": FILES["05-resources/cake.md"].replace("Chocolate", "Lemon")})
            engine.apply_changes([root / "05-resources/cake.md"])
        elif step == "edited":
            (root / "05-resources/postgres.md").unlink()
            engine.apply_changes([root / "05-resources/postgres.md"])
    engine.close()


def test_nearest_gives_every_rows_cosine_from_the_product_it_computed(make_workspace):
    """``nearest_and_cosines``: the nearest rows, and each id's cosine from the same product, equal to
    ``similarities``' floats; nan for an id without a row; none when the memo answered (no product ran)."""
    engine = Engine(make_workspace(FILES))
    engine.load()
    vectors = engine.vectors
    try:
        query = vectors.embed_query("my truck broke down")
        found, cosine_of = vectors.nearest_and_cosines(query, 3)
        assert cosine_of is not None and len(found) == 3
        ids = [mid for mid in vectors._state[3]]
        exact = vectors.similarities(query, ids)
        assert len(exact) == len(FILES) and all(cosine_of(mid) == exact[mid] for mid in ids)
        assert [m for m, _ in found] == sorted(exact, key=lambda m: -exact[m])[:3]
        assert math.isnan(cosine_of("unknown"))
        again, none = vectors.nearest_and_cosines(query, 3)  # from the memo: the same list, no product
        assert again == found and none is None
        assert vectors.nearest(query, 3) == found
        # the query path's two parts: the product on another thread, the rest here; the same answer
        other = vectors.embed_query("a recipe for bread")
        split = vectors.nearest_search(other, 4)
        worker = threading.Thread(target=split.product)
        worker.start()
        worker.join()
        parts, parts_cosine = split.result()
        vectors._nearest_memo = type(vectors._nearest_memo)(None)  # forget it: computed whole again
        whole, whole_cosine = vectors.nearest_and_cosines(other, 4)
        assert parts == whole and parts_cosine is not None and whole_cosine is not None
        assert all(parts_cosine(mid) == whole_cosine(mid) for mid in ids)
        unrun = vectors.nearest_search(other, 4)  # known now: nothing to compute, in either part
        unrun.product()
        assert unrun.result() == (whole, None)
    finally:
        engine.close()


def _stable_best(scores: np.ndarray, k: int) -> list[int]:
    """The rows of the ``k`` highest scores by a full stable sort: equal scores, the lower row first."""
    return np.argsort(-scores, kind="stable")[:k].tolist()


@pytest.mark.parametrize("rows", [1, 5, 127, 128, 129, 1000, 10_000, 100_003])
def test_the_nearest_rows_by_block_threshold_equal_a_full_sort(rows):
    """``_best_rows`` (block maxima, then the rows at or above the ``k``-th of them) picks the rows a full
    stable sort picks, in its order: with duplicate scores (copies of one text share an embedding),
    free rows at -inf, fewer live rows than ``k``, a block count not dividing the rows, and ``k`` at or
    above the number of blocks (the ``np.argpartition`` path)."""
    from ctxos.services.semantic.vectors import TOP_BLOCK, _best_rows

    rng = np.random.default_rng(rows)
    scores = (rng.standard_normal(rows) * 0.2).astype(np.float32)
    scores[rng.random(rows) < 0.2] = -np.inf  # free rows
    copies = rng.integers(0, rows, size=rows // 10)
    scores[copies] = scores[rng.integers(0, rows, size=len(copies))]  # ties, some across blocks
    for k in sorted({1, 2, 25, 50, 400, rows // TOP_BLOCK, rows // TOP_BLOCK + 1, rows}):
        if 0 < k <= rows:
            assert _best_rows(scores, k).tolist() == _stable_best(scores, k), k
    few = np.full(rows, -np.inf, dtype=np.float32)
    few[:3] = [0.5, 0.1, 0.5][:rows]
    assert _best_rows(few, min(rows, 50)).tolist() == _stable_best(few, min(rows, 50))


class _CountingModel:
    """The real WordLlama model, counting the texts it embeds (to see what the memos spare)."""

    def __init__(self) -> None:
        self.inner = load_model("wordllama")
        self.name, self.dim, self.texts = self.inner.name, self.inner.dim, 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts += len(texts)
        return self.inner.embed(texts)


def test_a_repeated_query_is_neither_classified_nor_embedded_again(tmp_path):
    """The intent classifier and the query embedding remember recent queries: same answers, no new embedding."""
    from ctxos.services.semantic.intents import MEMO_SIZE, PrototypeClassifier
    from ctxos.services.semantic.scorer import QUERY_MEMO, EmbeddingScorer
    from ctxos.services.semantic.vectors import VectorIndex

    model = _CountingModel()
    classifier = PrototypeClassifier(model)
    queries = ["why does the build fail after the upgrade", "what did we decide about billing", "docker compose"]
    model.texts = 0
    first = [classifier.classify(q) for q in queries]
    assert model.texts == len(queries) and first[0] is not None
    assert [classifier.classify(q) for q in queries] == first and model.texts == len(queries)
    for i in range(MEMO_SIZE + 1):  # bounded: a full memo starts again
        classifier.classify(f"query number {i}")
    assert classifier._remembered.cache_info().currsize <= MEMO_SIZE

    scorer = EmbeddingScorer(VectorIndex(model, None))
    model.texts = 0
    vectors = [scorer.query_vector(q) for q in queries]
    assert all(np.array_equal(v, model.inner.embed([q])[0]) for v, q in zip(vectors, queries))
    model.texts = 0
    assert all(scorer.query_vector(q) is v for q, v in zip(queries, vectors)) and model.texts == 0
    for i in range(QUERY_MEMO + 1):
        scorer.query_vector(f"query number {i}")
    assert scorer._embedded.cache_info().currsize <= QUERY_MEMO


def test_a_patched_centre_equals_one_computed_afresh(make_workspace, monkeypatch):
    """After a few rows change, the centre copies the free-row mask and |m|^2 of the others and recomputes the
    changed ones (a 100,000-memory save recomputed everything): every array equals a fresh computation exactly,
    through edits, additions, a removal and the reuse of the freed row."""
    from ctxos.services.semantic.vectors import _Centre

    files = {
        f"05-resources/n{i:02d}.md": f"---\nid: n{i:02d}\n---\nNote {i} about {('cars', 'cakes', 'code')[i % 3]}.\n"
        for i in range(30)
    }
    root = make_workspace(files)
    engine = Engine(root)
    engine.load()
    vectors = engine.vectors
    patched = 0

    def check(step: str) -> None:
        nonlocal patched
        codes, scale, ids, _ = vectors._state
        kept, fresh = vectors._centre, _Centre(codes, scale, ids)
        for name in ("free", "squares", "mean", "row_dot", "row_norm"):
            assert np.array_equal(getattr(kept, name), getattr(fresh, name)), (step, name)
        assert kept.mean_sq == fresh.mean_sq, step

    whole = quantized.squared_norms

    def counting(codes, scale):  # a patched centre computes |m|^2 for the changed rows only
        nonlocal patched
        patched += len(codes) < len(vectors._state[0])
        return whole(codes, scale)

    monkeypatch.setattr(quantized, "squared_norms", counting)
    try:
        check("loaded")
        write_files(root, {"05-resources/n03.md": files["05-resources/n03.md"].replace("cars", "lemon tarts")})
        engine.apply_changes([root / "05-resources/n03.md"])
        check("edited")
        freed = vectors._state[3]["n07"]
        (root / "05-resources/n07.md").unlink()
        engine.apply_changes([root / "05-resources/n07.md"])
        check("removed")
        assert "n07" not in vectors._state[3] and vectors._centre.free[freed]
        write_files(root, {"05-resources/new.md": "---\nid: new\n---\nA new note about engines.\n"})
        engine.apply_changes([root / "05-resources/new.md"])
        check("added into the freed row")
        assert vectors._state[3]["new"] == freed and not vectors._centre.free[freed]
    finally:
        engine.close()
    assert patched >= 3  # the saves patched the centre rather than recomputing it
