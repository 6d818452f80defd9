"""Frame assembly in time order (``analysis.readers._assembly``: ``TimeOrder``, ``drain``,
``from_codes``, the ``Assembler``) and the Kineto reader built on it: the output must not
depend on where the row blocks or the chunk pieces begin and end."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from analysis.readers import _assembly, _chrome, _memory, kineto


def _pieces(arr: np.ndarray, rng) -> list[np.ndarray]:
    cuts = np.sort(rng.integers(0, arr.size + 1, size=5))
    return [p.copy() for p in np.split(arr, cuts)]


@pytest.mark.parametrize("block", [1, 3, 1 << 16])
def test_time_order_places_rows_as_a_stable_sort(block, monkeypatch):
    monkeypatch.setattr(_assembly, "BLOCK_ROWS", block)
    rng = np.random.default_rng(block)
    start = rng.integers(0, 20, size=101).astype(np.int64)  # many ties
    expected_order = np.argsort(start, kind="stable")
    values = rng.integers(-(2**40), 2**40, size=start.size)
    seen = {}

    def refine(order, sorted_start):
        seen["sorted"] = sorted_start.copy()
        np.testing.assert_array_equal(order, expected_order)

    s = start.copy()
    order = _assembly.TimeOrder(s, refine=refine)
    np.testing.assert_array_equal(s, np.sort(start))
    np.testing.assert_array_equal(seen["sorted"], np.sort(start))
    pieces = _pieces(values, rng)
    col = order.column(pieces, np.int64)
    assert pieces == []  # emptied: each piece is freed once placed
    np.testing.assert_array_equal(col, values[expected_order])
    np.testing.assert_array_equal(order.rows(np.array([0, 50, 100])),
                                  np.argsort(expected_order)[[0, 50, 100]])


@pytest.mark.parametrize("case", ["ties", "negative", "wide", "tiny", "int32"])
def test_sort_stable_is_the_stable_argsort(case):
    """The one-key sort equals NumPy's stable argsort, ties in storage order, including
    where the value range is too wide for the key (the stable sort is used then)."""
    rng = np.random.default_rng(7)
    values = {
        "ties": rng.integers(0, 50, size=100_003),
        "negative": rng.integers(-(2**35), 2**35, size=70_001) // 1000 * 1000,
        "wide": np.concatenate([rng.integers(-(2**62), 2**62, size=5_000), np.full(9, 3)]),
        "tiny": np.array([5]),
        "int32": rng.integers(-100, 100, size=1_000).astype(np.int32),
    }[case].copy()
    before = values.copy()
    order, ordered = _assembly.sort_stable(values)
    expected = np.argsort(before, kind="stable")
    np.testing.assert_array_equal(order, expected)
    np.testing.assert_array_equal(ordered, before[expected])
    assert ordered.dtype == before.dtype
    np.testing.assert_array_equal(values, before)  # the input is left as it was


def test_small_pages_switches_numpy_off_while_inside_and_restores(monkeypatch):
    from numpy._core import multiarray as ma

    before = ma._get_madvise_hugepage()
    monkeypatch.setattr(_memory, "hugepages_stall", lambda: True)
    ma._set_madvise_hugepage(True)
    try:
        with _memory.small_pages():
            assert not ma._get_madvise_hugepage()
            with _memory.small_pages():  # nested (another thread's read): still off
                assert not ma._get_madvise_hugepage()
            assert not ma._get_madvise_hugepage()
        assert ma._get_madvise_hugepage()  # the last one out restores it
        with pytest.raises(RuntimeError), _memory.small_pages():
            raise RuntimeError("a reader failed")
        assert ma._get_madvise_hugepage()
        monkeypatch.setattr(_memory, "hugepages_stall", lambda: False)
        with _memory.small_pages():  # a kernel that never stalls: left as it is
            assert ma._get_madvise_hugepage()
    finally:
        ma._set_madvise_hugepage(before)


def test_small_pages_act_only_for_large_inputs(monkeypatch, tmp_path):
    """Rule 7 of issue 26: NumPy's process-wide switch is touched only by reads of files
    large enough for it to matter (a gzipped file counts as its text's size)."""
    import gzip
    import random

    from numpy._core import multiarray as ma

    import analysis
    from analysis import readers
    from analysis.schema import make_events

    monkeypatch.setattr(_memory, "SMALL_PAGES_MIN_BYTES", 4000)
    assert not _memory.needs_small_pages(3999, False) and _memory.needs_small_pages(4000, False)
    assert _memory.needs_small_pages(500, True) and not _memory.needs_small_pages(499, True)
    monkeypatch.setattr(_memory, "hugepages_stall", lambda: True)
    seen = []

    def read(path, run_id=None):
        seen.append(bool(ma._get_madvise_hugepage()))
        return make_events(name=["x"], kind="compute", start_ns=[1], dur_ns=[1], source="t")

    monkeypatch.setitem(readers.REGISTRY, "pages_test", readers.Reader("pages_test", lambda p: False, read))
    small, large = tmp_path / "small.bin", tmp_path / "large.bin"
    small.write_bytes(b"s" * 3000)
    large.write_bytes(b"l" * 5000)
    packed = tmp_path / "packed.gz"
    packed.write_bytes(gzip.compress(random.Random(0).randbytes(1000)))  # about 1 KB
    assert 500 < packed.stat().st_size < 4000
    before = ma._get_madvise_hugepage()
    ma._set_madvise_hugepage(True)
    try:
        for path in (small, large, packed):
            analysis.read(path, "pages_test", cache=False)
        assert ma._get_madvise_hugepage()  # restored
    finally:
        ma._set_madvise_hugepage(before)
    assert seen == [True, False, False]  # small: left alone; large and gzipped: switched off


def test_hugepages_stall_reads_the_active_defrag_mode(monkeypatch, tmp_path):
    import builtins

    real_open = builtins.open
    setting = tmp_path / "defrag"

    def fake_open(name, *a, **k):
        return real_open(setting if str(name).endswith("transparent_hugepage/defrag") else name, *a, **k)

    monkeypatch.setattr(builtins, "open", fake_open)
    for text, stalls in [("always defer defer+madvise [madvise] never", True),
                         ("always defer [defer+madvise] madvise never", True),
                         ("always [defer] defer+madvise madvise never", False),
                         ("always defer defer+madvise madvise [never]", False)]:
        setting.write_text(text + "\n")
        assert _memory.hugepages_stall() is stalls, text
    setting.unlink()
    assert _memory.hugepages_stall() is False  # no such setting (not Linux)


def test_assembler_joins_small_chunks_into_pieces(monkeypatch):
    """Chunks are stored as pieces of about BLOCK_ROWS rows, in order, whatever reads the
    pieces first (the frame building, a merge, a pickle for the trip back from a worker)."""
    import pickle

    monkeypatch.setattr(_assembly, "BLOCK_ROWS", 8)
    rows = _assembly.Assembler(("a", "b"))
    for i in range(10):
        rows.add("a", start=np.arange(3 * i, 3 * i + 3), x=np.full(3, i))
    rows.add("b", start=np.arange(2))
    assert rows.sizes == {"a": 30, "b": 2}
    back = pickle.loads(pickle.dumps(rows))
    for r in (rows, back):
        assert [p.size for p in r.pieces["a"]["start"]] == [9, 9, 9, 3]
        np.testing.assert_array_equal(np.concatenate(r.pieces["a"]["start"]), np.arange(30))
        np.testing.assert_array_equal(np.concatenate(r.pieces["a"]["x"]), np.repeat(np.arange(10), 3))
        assert [p.size for p in r.pieces["b"]["start"]] == [2]
    rows.add("a", start=np.arange(30, 32))  # other columns: what was pending is a piece first
    assert [p.size for p in rows.pieces["a"]["start"]] == [9, 9, 9, 3, 2]
    assert [p.size for p in rows.pieces["a"]["x"]] == [9, 9, 9, 3]


def test_refine_reorders_ties():
    start = np.array([5, 1, 5, 5, 1], dtype=np.int64)

    def reverse_ties(order, sorted_start):
        lo, hi = np.searchsorted(sorted_start, [5, 6])
        order[lo:hi] = order[lo:hi][::-1].copy()

    order = _assembly.TimeOrder(start, refine=reverse_ties)
    col = order.column([np.arange(5)], np.int64)
    assert col.tolist() == [1, 4, 3, 2, 0]


def test_drain_walks_lists_in_step_and_empties_them():
    a = [np.arange(3), np.arange(2)]
    b = [np.ones(3, bool), np.zeros(2, bool)]
    got = [(x.size, y.size) for x, y in _assembly.drain(a, b)]
    assert got == [(3, 3), (2, 2)] and a == [] and b == []
    assert _assembly.concat_pieces([np.arange(2), np.arange(3)], np.int16).tolist() == [0, 1, 0, 1, 2]


@pytest.mark.parametrize("block", [1, 4, 1 << 16])
def test_from_codes_is_pandas_without_unused_categories(block, monkeypatch):
    monkeypatch.setattr(_assembly, "BLOCK_ROWS", block)
    rng = np.random.default_rng(block)
    cats = [f"c{i}" for i in range(300)]  # more than int8 holds: int16 codes
    codes = rng.choice(np.r_[-1, np.arange(0, 300, 2)], size=1000).astype(np.int32)
    got = _assembly.from_codes(codes, cats)
    expected = pd.Categorical.from_codes(
        codes, categories=pd.Index(cats, dtype=object)).remove_unused_categories()
    pd.testing.assert_extension_array_equal(got, expected)
    assert got.codes.dtype == np.int16


def _kineto_files(data_dir):
    files = sorted((data_dir / "kineto").glob("*.json*"))
    corpus_dir = data_dir.parents[2] / "shared" / "corpus"  # used when present
    if corpus_dir.is_dir():
        # GPU traces: kernels, copies, NCCL, correlation steps, streams (by args and by tid)
        files += [corpus_dir / "kineto" / n for n in (
            "hta__nccl_data.json.gz", "hta__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
            "hta__negative_queue_length_rank0.json.gz",
            "param_dlrm_8rank/worker0_step_12.1694128201545.pt.trace.json")]
    return [f for f in files if f.exists()]


def _read(f):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        df = kineto.read(f)
    return df, [str(x.message) for x in w]


@pytest.mark.parametrize("block", [1, 7])
def test_kineto_frame_does_not_depend_on_row_blocks(block, data_dir, monkeypatch):
    files = _kineto_files(data_dir)
    longest = 0
    for f in files:
        expected, w_expected = _read(f)
        longest = max(longest, len(expected))
        monkeypatch.setattr(_assembly, "BLOCK_ROWS", block)
        monkeypatch.setattr(_chrome, "BLOCK_BYTES", 4096)  # many small pieces too
        got, w_got = _read(f)
        monkeypatch.undo()
        pd.testing.assert_frame_equal(expected, got, obj=f"{f.name}, {block}-row blocks")
        assert w_expected == w_got, f.name
    assert longest > 2 * block  # several blocks


def _assembler(rng, n_pieces=6) -> tuple[_assembly.Assembler, dict]:
    """Three groups of random rows with many tied starts; groups "a" and "c" carry a tie
    key (unique within the group, stored out of order), group "b" has none."""
    asm = _assembly.Assembler(("a", "b", "c"))
    stored = {g: {"start": [], "key": [], "v": []} for g in asm.groups}
    for _ in range(n_pieces):
        for g in asm.groups:
            m = int(rng.integers(0, 9))
            start = rng.integers(0, 6, size=m).astype(np.int64)
            v = rng.integers(-100, 100, size=m)
            cols = {"start": start, "v": v}
            if g != "b":
                cols["k"] = rng.permutation(1000)[:m].astype(np.int64) + 1000 * len(stored[g]["v"])
                stored[g]["key"].append(cols["k"])
            stored[g]["start"].append(start)
            stored[g]["v"].append(v)
            asm.add(g, **cols)
    return asm, {g: {c: np.concatenate(x) if x else np.zeros(0, np.int64) for c, x in d.items()}
                 for g, d in stored.items()}


@pytest.mark.parametrize("block", [1, 5, 1 << 16])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_assembler_orders_ties_by_group_then_key(block, seed, monkeypatch):
    """The generic secondary key: rows in time order, ties by (group, key), rows of a group
    without a key in storage order, whatever the row blocks."""
    monkeypatch.setattr(_assembly, "BLOCK_ROWS", block)
    rng = np.random.default_rng(seed)
    asm, stored = _assembler(rng)
    start = np.concatenate([stored[g]["start"] for g in asm.groups])
    group = np.concatenate([np.full(stored[g]["start"].size, i) for i, g in enumerate(asm.groups)])
    sec = np.concatenate([stored["a"]["key"], np.arange(stored["b"]["start"].size),
                          stored["c"]["key"]])
    values = np.concatenate([stored[g]["v"] for g in asm.groups])
    expected = np.lexsort((sec, group, start))
    got_start = asm.order("start", tie_key="k", offset=7)
    np.testing.assert_array_equal(got_start, start[expected] + 7)
    out = asm.column("v", np.int64)
    np.testing.assert_array_equal(out, values[expected])
    assert all(not p for g in asm.groups for p in asm.pieces[g].values())  # all freed


def test_assembler_place_fill_codes_sparse_and_events():
    asm = _assembly.Assembler(("x", "y"))
    asm.add("x", start=np.array([5, 1], dtype=np.int64), name=np.array([1, -1], dtype=np.int32))
    asm.add("y", start=np.array([3], dtype=np.int64), name=np.array([-2], dtype=np.int32))
    asm.add_sparse("bytes", np.array([1, 1]), np.array([10, 20]), group="x")  # later wins
    asm.add_sparse("bytes", np.array([0]), np.array([30]), group="y")
    names = asm.codes("name", ["unused", "b"], negative=("NEG", "<unnamed>"))
    assert names.kept == ["b", "NEG", "<unnamed>"] and names.dtype == np.int8
    start = asm.order()
    assert start.tolist() == [1, 3, 5]
    name, kind = asm.empty(names.dtype), asm.empty(np.int8)
    asm.place((name, kind), "x", ("name",), lambda x: (names(x), x + 1))
    asm.place(name, "y", ("name",), names)
    asm.fill(kind, "y", 9)
    nbytes, na = asm.sparse("bytes", np.int64)
    df = asm.events(name=_assembly.categorical(name, names.kept),
                    kind=_assembly.from_codes(kind, ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]),
                    start_ns=start, dur_ns=np.zeros(3, dtype=np.int64), rank=3, run_id="r",
                    bytes=pd.arrays.IntegerArray(nbytes, na), source="test")
    assert df["name"].tolist() == ["<unnamed>", "NEG", "b"]
    assert df["kind"].tolist() == ["a", "j", "c"]
    assert df["bytes"].fillna(-1).tolist() == [20, 30, -1]
    assert df["rank"].tolist() == [3] * 3 and str(df["rank"].dtype) == "Int32"
    assert df["run_id"].tolist() == ["r"] * 3 and df["host"].isna().all()
    assert df["tid"].isna().all() and str(df["device"].dtype) == "Int16"


def test_key_codes_by_table_and_by_search():
    for keys in ([3, 0, 7], [3, -5, 2**40]):
        codes = _assembly.KeyCodes(dict(zip(keys, ["a", "b", "a"], strict=True)))
        assert codes.categories == ["a", "b"]
        q = np.array([keys[0], keys[1], keys[2], 11, -1], dtype=np.int64)
        assert codes(q).tolist() == [0, 1 if keys[1] >= 0 else -1, 0, -1, -1]


def test_format_modules_leave_frame_building_to_the_assembler():
    """Issue 12: a format module decodes and maps; time ordering, scatter/drain and
    returning memory belong to ``_assembly`` (no format module names those helpers), and
    no function of a format module is longer than 80 lines."""
    import ast
    from pathlib import Path

    internals = {"drain", "concat_pieces", "release_freed_memory", "TimeOrder", "row_blocks",
                 "lazy_zeros", "scatter", "malloc_trim"}
    modules = sorted(p for p in Path(_assembly.__file__).parent.glob("*.py")
                     if not p.name.startswith("_"))
    assert {"horovod.py", "kineto.py"} <= {p.name for p in modules}
    for path in modules:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        used = ({n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
                | {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)})
        assert not used & internals, f"{path.name} builds frames by hand: {used & internals}"
        long = {f.name: f.end_lineno - f.lineno + 1 for f in ast.walk(tree)
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                and f.end_lineno - f.lineno + 1 > 80}
        assert not long, f"{path.name}: functions over 80 lines: {long}"
