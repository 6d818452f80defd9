"""One frame assembler: memory-bounded frame building for readers that parse in chunks.

A reader that streams a file turns each chunk of records into small per-column arrays
("pieces") and hands them to an :class:`Assembler`; once the file is read, it places every
row in time order and builds the frame's columns from the pieces. The reader keeps the
format: decoding, matching, and mapping rules as small pure functions of a block of rows.
The assembler owns the memory bound:

* **time order**: the start times are gathered and sorted in place (they become
  ``start_ns``); one int32 output position per row says where each stored row goes. Ties
  keep storage order, or follow a secondary key (:meth:`Assembler.order`);
* **scatter and drain**: every output column is allocated once and each piece is written
  straight to its rows and freed, so pieces shrink while the columns grow; values derived
  from several columns are computed piece by piece, in blocks of at most
  :data:`BLOCK_ROWS` rows;
* **narrowing**: category codes are renumbered over the categories in use, in the
  narrowest int type (:meth:`Assembler.codes`, :func:`code_map`), and nullable integers
  are narrowed with a note rather than wrapped (:func:`masked`);
* **lazy columns**: all-missing columns cost only their mask (:func:`missing`), constant
  columns only their int8 codes (:func:`const_category`);
* **returning memory**: freed pieces are given back to the OS every :data:`TRIM_BYTES`
  (:func:`analysis.readers._memory.release_freed_memory`), so they never pile up under
  the growing columns.

Beyond the frame itself, only the positions and a few blocks' temporaries exist at a time:
the peak of a read is the frame plus a bounded buffer (measured in benchmarks/README.md,
"Memory at 1 GB and beyond"). The parse cache (:mod:`analysis.readers.cache`) builds its
lazy columns with the same helpers.
"""

from __future__ import annotations

import mmap
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.readers._memory import release_freed_memory
from analysis.schema import EVENT_COLUMNS, make_events

#: Rows per block in the loops that build a frame's columns: bounds their temporaries
#: (a few MiB) whatever the row count.
BLOCK_ROWS = 1 << 16
#: Freed piece memory is given back to the OS (:func:`release_freed_memory`) after about
#: this many bytes, so that it never piles up while the output columns grow.
TRIM_BYTES = 8 << 20
#: Arrays at least this large come from an anonymous memory map in :func:`lazy_zeros`.
LAZY_ZEROS_MIN_BYTES = 1 << 20
#: NumPy value type of each pandas nullable integer dtype.
NP_INT = {"Int8": np.int8, "Int16": np.int16, "Int32": np.int32, "Int64": np.int64}


# --------------------------------------------------------------------------------------
# threads


def concurrently(*calls: Callable[[], Any]) -> list[Any]:
    """``[call() for call in calls]``, the first here and the others in threads of their
    own, at the same time: for frame building steps that spend their time in NumPy
    (sorting, scattering into columns), which releases the GIL, on columns of their own.
    Results in the order of ``calls``; the first exception (in that order) is raised."""
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException | None] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as exc:  # raised again below, in the caller's thread
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(1, len(calls))]
    for t in threads:
        t.start()
    run(0)
    for t in threads:
        t.join()
    for exc in errors:
        if exc is not None:
            raise exc
    return results


def lazy_zeros(n: int, dtype) -> np.ndarray:
    """A writable array of ``n`` zeros whose memory is not resident until written.

    ``np.zeros`` gives that only while the allocator maps fresh pages, which glibc stops
    doing for blocks below 32 MiB once large blocks have been freed (its dynamic mmap
    threshold); a private anonymous map of the size needed gives it always.
    """
    dtype = np.dtype(dtype)
    nbytes = n * dtype.itemsize
    if nbytes < LAZY_ZEROS_MIN_BYTES:
        return np.zeros(n, dtype=dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype=dtype, count=n)


def row_blocks(n: int) -> Iterator[slice]:
    """Slices of at most :data:`BLOCK_ROWS` rows covering ``range(n)``."""
    step = BLOCK_ROWS
    for i in range(0, n, step):
        yield slice(i, min(i + step, n))


def drain(*columns: list[np.ndarray]) -> Iterator[tuple[np.ndarray, ...]]:
    """Yield the pieces of one or more piece lists in step (first to last), emptying them.

    Each piece is forgotten once the caller's loop moves on, and freed memory is returned
    to the OS every :data:`TRIM_BYTES`, so the pieces shrink as the outputs grow.
    """
    lists = [list(reversed(c)) for c in columns]
    for c in columns:
        c.clear()
    freed = 0
    while lists[0]:
        items = tuple(lst.pop() for lst in lists)
        size = sum(a.nbytes for a in items)
        yield items
        del items
        freed += size
        if freed >= TRIM_BYTES:
            release_freed_memory()
            freed = 0
    release_freed_memory()


def gather(blocks: Iterable[slice], where: Callable[[slice], np.ndarray],
           *columns: np.ndarray) -> tuple[np.ndarray, ...]:
    """``columns`` at the rows where ``where(block)`` (a mask of the block's rows) holds,
    gathered block by block: beyond the results, only a block's temporaries are made."""
    parts: list[list[np.ndarray]] = [[] for _ in columns]
    for b in blocks:
        w = where(b)
        if w.any():
            for part, col in zip(parts, columns, strict=True):
                part.append(col[b][w])
    return tuple(np.concatenate(p) if p else np.zeros(0, dtype=c.dtype)
                 for p, c in zip(parts, columns, strict=True))


def concat_pieces(pieces: list[np.ndarray], dtype) -> np.ndarray:
    """One array from a piece list, freeing the pieces as they are copied."""
    out = np.empty(sum(p.size for p in pieces), dtype=dtype)
    at = 0
    for (p,) in drain(pieces):
        out[at : at + p.size] = p
        at += p.size
    return out


# --------------------------------------------------------------------------------------
# columns


def na_int(n: int, dtype: str) -> pd.arrays.IntegerArray:
    """An all-missing nullable integer array of length ``n``.

    Its values are :func:`lazy_zeros` that nothing writes, so only the mask costs memory.
    """
    return pd.arrays.IntegerArray(lazy_zeros(n, NP_INT[dtype]), np.ones(n, dtype=bool))


def const_category(value: str | None, n: int) -> pd.Categorical:
    """A categorical of ``n`` times ``value`` (or all missing), built from int8 codes."""
    if value is None:
        return pd.Categorical.from_codes(np.full(n, -1, dtype=np.int8),
                                         categories=pd.Index([], dtype=object))
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8),
                                     categories=pd.Index([value], dtype=object))


def missing(n: int, dtype: str) -> Any:
    """An all-missing column of schema ``dtype`` (``category`` or a nullable integer) that
    costs only its mask or its codes."""
    return const_category(None, n) if dtype == "category" else na_int(n, dtype)


def categorical(codes: np.ndarray, categories: list) -> pd.Categorical:
    """A categorical of ``codes`` (already valid, -1 = missing) over object ``categories``."""
    return pd.Categorical.from_codes(codes, categories=pd.Index(categories, dtype=object),
                                     validate=False)


def categories_used(pieces: list[np.ndarray], n_categories: int) -> np.ndarray:
    """Which of ``n_categories`` categories the int codes in ``pieces`` use (-1: none)."""
    used = np.zeros(n_categories + 1, dtype=bool)
    for p in pieces:
        for b in row_blocks(p.size):
            used[p[b] + 1] = True
    return used[1:]


def code_map(used: np.ndarray, categories: list) -> tuple[np.ndarray, list]:
    """``(remap, kept)``: the used categories, and a table from an old code + 1 (slot 0:
    missing) to the new code among them, in the narrowest int type that holds it."""
    kept = [c for c, u in zip(categories, used.tolist(), strict=True) if u]
    small = np.int8 if len(kept) < 2**7 else np.int16 if len(kept) < 2**15 else np.int32
    remap = np.full(len(categories) + 1, -1, dtype=small)
    remap[1:][used] = np.arange(len(kept), dtype=small)
    return remap, kept


def from_codes(codes: np.ndarray, categories: list, *, inplace: bool = False) -> pd.Categorical:
    """A categorical from int codes (-1 = missing) and category values, unused ones dropped.

    The same as ``Categorical.from_codes(...).remove_unused_categories()``, in linear time
    (a flag per category instead of pandas' sort of the codes) and in blocks, so the only
    row-length array made is the result's narrow codes. With ``inplace``, codes already of
    that narrow type are renumbered in place (the caller gives up the array) and no
    row-length array is made at all.
    """
    codes = np.asarray(codes)
    remap, kept = code_map(categories_used([codes], len(categories)), categories)
    new = codes if inplace and codes.dtype == remap.dtype else np.empty(codes.size, remap.dtype)
    for b in row_blocks(codes.size):
        new[b] = remap[codes[b] + 1]
    return categorical(new, kept)


def masked(values: np.ndarray, mask: np.ndarray, dtype: str, *, damage: Any = None,
           column: str = "") -> pd.arrays.IntegerArray:
    """A pandas nullable integer array from values and a missing-mask.

    Values are narrowed to ``dtype`` in blocks, so the only row-length arrays made are of
    the narrow type. A present value that does not fit ``dtype`` becomes missing, counted
    in ``damage.notes`` (a warning) rather than wrapped around as a plain cast (or pandas'
    ``astype``) would do silently.
    """
    values = np.asarray(values)
    mask = np.asarray(mask, dtype=bool)
    np_dtype = np.dtype(NP_INT[dtype])
    if values.dtype != np_dtype and values.size:
        info = np.iinfo(np_dtype)
        narrow = np.empty(values.size, dtype=np_dtype)
        narrow_mask = np.empty(values.size, dtype=bool)
        n_bad = 0
        for b in row_blocks(values.size):
            v, m = values[b], mask[b]
            bad = ((v < info.min) | (v > info.max)) & ~m
            n_bad += int(bad.sum())
            narrow_mask[b] = m | bad
            narrow[b] = v  # masked slots may wrap: they are missing
        if n_bad and damage is not None:
            damage.notes.append(f"{n_bad} {column or 'integer'} value(s) outside "
                                f"{dtype}'s range were set missing")
        values, mask = narrow, narrow_mask
    return pd.arrays.IntegerArray(values, mask)


class Categories:
    """A string column's category list, grown chunk by chunk; chunks become int32 codes.

    ``props`` are per-category tables grown with the list: ``name=(fn, dtype, fill)`` keeps
    ``self.props[name]``, ``fn(category)`` for each category and a trailing slot ``fill``
    that serves code -1 (missing), so that ``self.props[name][codes]`` looks codes up.
    """

    def __init__(self, **props: tuple[Callable[[Any], Any], Any, Any]) -> None:
        self.index: dict[Any, int] = {}
        # the codes of values already seen, None included: a chunk whose values are all
        # known (nearly every chunk of a file) is encoded by dict lookups alone
        self._known: dict[Any, int] = {None: -1}
        self._props = props
        self.props = {k: np.array([fill], dtype=dtype) for k, (_, dtype, fill) in props.items()}

    def encode(self, values: list) -> np.ndarray:
        """int32 codes of ``values`` (-1 for None and other missing values such as NaN) in
        the growing category list."""
        try:
            return np.fromiter(map(self._known.__getitem__, values), np.int32, count=len(values))
        except (KeyError, TypeError):  # a value not seen before (or unhashable): factorize
            pass
        codes, uniques = pd.factorize(np.array(values, dtype=object), use_na_sentinel=True)
        n = len(self.index)
        remap = np.array([self.index.setdefault(u, len(self.index)) for u in uniques] + [-1],
                         dtype=np.int32)
        self._known.update(zip(uniques, remap[:-1].tolist(), strict=True))
        if self._props and len(self.index) > n:
            new = list(self.index)[n:]
            for k, (fn, dtype, _) in self._props.items():
                t = self.props[k]
                self.props[k] = np.concatenate([t[:-1], np.array([fn(c) for c in new], dtype),
                                                t[-1:]])
        return remap[codes]  # code -1 maps to the appended -1


class Codes:
    """New category codes of stored codes, from :meth:`Assembler.codes`.

    ``codes(x)`` maps an array of stored codes to the new ones; :attr:`kept` are the
    categories of the new codes and :attr:`dtype` their int type.
    """

    def __init__(self, table: np.ndarray, kept: list, offset: int,
                 convert: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        self.table, self.kept, self.offset, self.convert = table, kept, offset, convert
        self.dtype = table.dtype

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.convert is not None:
            x = self.convert(x)
        return self.table[x + self.offset]


#: Largest int key served by a lookup table (4 MiB) in :class:`KeyCodes` rather than a search.
KEY_TABLE_MAX = 1 << 20


class KeyCodes:
    """Category codes of int keys (a category per key, as ``{key: value}``; -1: no key).

    :attr:`categories` are the distinct values; calling the object maps an int array of
    keys (negative: none) to int32 codes, by a lookup table when the keys are small
    non-negative integers (Horovod's tensor pids), else by a search.
    """

    def __init__(self, values: dict[int, Any]) -> None:
        keys = np.array(list(values), dtype=np.int64)
        codes, uniq = pd.factorize(np.array(list(values.values()), dtype=object))
        self.categories = list(uniq)
        self.table = None
        if keys.min() >= 0 and keys.max() < KEY_TABLE_MAX:
            self.table = np.full(int(keys.max()) + 2, -1, dtype=np.int32)
            self.table[keys] = codes
        else:
            korder = np.argsort(keys)
            self.keys = keys[korder]
            self.codes = np.asarray(codes)[korder].astype(np.int32)

    def __call__(self, key: np.ndarray) -> np.ndarray:
        ok = key >= 0
        if self.table is not None:
            last = self.table.size - 1
            return self.table[np.where(ok, np.minimum(key, last), last)]
        out = np.full(key.size, -1, dtype=np.int32)
        where = np.minimum(np.searchsorted(self.keys, key), self.keys.size - 1)
        found = (self.keys[where] == key) & ok
        out[found] = self.codes[where[found]]
        return out


# --------------------------------------------------------------------------------------
# time order


def sort_stable(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(order, values[order])`` for ``order = np.argsort(values, kind="stable")`` of int
    values, without a stable sort where the values allow it (``order`` is then int32 below
    2**31 values).

    NumPy's stable sort of int64 is a merge sort (timsort); its default sort is several
    times faster (vectorised where the CPU has the instructions) but not stable. Ties are
    broken by storage index in one int64 key, ``(value - min) << bits | index``, which is
    unique, so the default sort orders the keys exactly as the stable sort orders the
    values. When the value range times the row count does not fit in 63 bits, the stable
    argsort is used.
    """
    n = values.size
    if n < 2:
        return np.zeros(n, dtype=np.int64), values.copy()
    lo, hi = int(values.min()), int(values.max())
    bits = (n - 1).bit_length()
    if (hi - lo) >> (62 - bits):  # the key would overflow: sort stably instead
        order = np.argsort(values, kind="stable")
        return order, values[order]
    key = values.astype(np.int64)
    key -= lo
    key <<= bits
    for b in row_blocks(n):  # the storage index, block by block (no n-row temporary)
        key[b] |= np.arange(b.start, b.stop, dtype=np.int64)
    key.sort()
    order = np.empty(n, dtype=np.int32 if n < 2**31 else np.int64)  # as TimeOrder's positions
    np.bitwise_and(key, (1 << bits) - 1, out=order, casting="unsafe")
    key >>= bits
    key += lo
    return order, key.astype(values.dtype, copy=False)


class TimeOrder:
    """Where each stored row goes when the rows are put in time order (stable).

    Built from the start times in storage order, which it **sorts in place**: that array
    becomes the frame's start column. ``refine(order, sorted_start)``, if given, may
    reorder tied rows of the permutation in place before it is inverted. Holds one int32
    position per row (int64 beyond 2**31 rows).
    """

    def __init__(self, start: np.ndarray,
                 refine: Callable[[np.ndarray, np.ndarray], None] | None = None,
                 order: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        n = start.size
        # else given: ``sort_stable(start)``
        order, ordered = sort_stable(start) if order is None else order
        start[:] = ordered
        del ordered
        if refine is not None:
            refine(order, start)
        dtype = np.int32 if n < 2**31 else np.int64
        pos = np.empty(n, dtype=dtype)
        for b in row_blocks(n):
            pos[order[b]] = np.arange(b.start, b.stop, dtype=dtype)
        del order
        release_freed_memory()
        self.n = n
        self.pos = pos

    def rows(self, stored: np.ndarray) -> np.ndarray:
        """Output rows of the stored rows ``stored`` (an index array)."""
        return self.pos[stored]

    def scatter(self, out: np.ndarray, values: Any, at: int, count: int | None = None) -> None:
        """``out[rows of stored rows at .. at+count] = values`` (``count`` defaults to
        ``len(values)``; a scalar needs it)."""
        count = len(values) if count is None else count
        out[self.pos[at : at + count]] = values

    def column(self, pieces: list[np.ndarray], dtype) -> np.ndarray:
        """A column in time order from its pieces in storage order (the list is emptied)."""
        out = np.empty(self.n, dtype=dtype)
        at = 0
        for (p,) in drain(pieces):
            self.scatter(out, p, at)
            at += p.size
        return out

    def release(self) -> None:
        """Forget the positions (call once every column is placed)."""
        self.pos = np.zeros(0, dtype=self.pos.dtype)
        release_freed_memory()


def _piece_blocks(pieces: list[np.ndarray]) -> Iterator[tuple[int, np.ndarray]]:
    """``(offset within the list, block of a piece)`` over a piece list, in order."""
    at = 0
    for p in pieces:
        for b in row_blocks(p.size):
            yield at + b.start, p[b]
        at += p.size


def late_rows(keys: list[np.ndarray]) -> np.ndarray:
    """Indices (within the piece list) of the keys smaller than a key stored before them:
    every inversion of key order involves one, so ties that hold none are in key order."""
    out = []
    top = None  # running max of the keys stored so far
    for at, x in _piece_blocks(keys):
        cm = np.maximum.accumulate(x)
        prev = np.empty_like(cm)
        if top is not None:
            np.maximum(cm, top, out=cm)
            prev[0] = top
        else:
            prev[0] = x[0]
        prev[1:] = cm[:-1]
        late = np.flatnonzero(x < prev)
        if late.size:
            out.append(at + late)
        top = cm[-1]
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


class _TieKey:
    """Orders tied rows by (group, key): ``refine`` for :class:`TimeOrder`.

    The stable sort by start leaves tied rows in storage order: by group, then as stored.
    Within a group that has a key, that is key order unless a late row (:func:`late_rows`)
    is among the ties, so only the tie runs at the start times of late rows are re-sorted,
    by (group, key; storage index in a group without one). Holds the keys of the rows
    starting at those times only, and works in batches of about :data:`BLOCK_ROWS` rows.
    """

    def __init__(self, start: np.ndarray, firsts: list[int],
                 keys: list[list[np.ndarray] | None]) -> None:
        late = [first + late_rows(k) for first, k in zip(firsts, keys, strict=True) if k]
        late = np.concatenate(late) if late else np.zeros(0, dtype=np.int64)
        self.times = np.unique(start[late]) if late.size else None
        del late
        self.firsts = np.array(firsts, dtype=np.int64)
        idx, val = [], []
        for first, k in zip(firsts, keys, strict=True):
            if self.times is None or not k:
                continue
            times = self.times
            for at, x in _piece_blocks(k):
                v = start[first + at : first + at + x.size]
                j = np.minimum(np.searchsorted(times, v), times.size - 1)
                hit = np.flatnonzero(times[j] == v)
                if hit.size:
                    idx.append(first + at + hit)
                    val.append(x[hit])
        for k in keys:
            if k:
                k.clear()
        release_freed_memory()
        self.idx = np.concatenate(idx) if idx else np.zeros(0, dtype=np.int64)  # ascending
        self.key = np.concatenate(val) if val else np.zeros(0, dtype=np.int64)
        self.keyed = np.array([bool(k is not None) for k in keys])

    def __call__(self, order: np.ndarray, sorted_start: np.ndarray) -> None:
        if self.times is None:
            return
        lo = np.searchsorted(sorted_start, self.times, "left")
        hi = np.searchsorted(sorted_start, self.times, "right")
        keep = hi - lo > 1
        lo, lens = lo[keep], (hi - lo)[keep]
        ends = np.cumsum(lens)
        i = 0
        while i < lo.size:  # a batch of runs of about BLOCK_ROWS rows in all
            j = int(np.searchsorted(ends, ends[i] - lens[i] + BLOCK_ROWS, "right"))
            j = max(j, i + 1)
            ln = lens[i:j]
            seg = np.repeat(np.arange(ln.size), ln)
            first = np.cumsum(ln) - ln
            at = np.arange(int(ln.sum())) - np.repeat(first - lo[i:j], ln)
            idx = order[at]
            group = np.searchsorted(self.firsts, idx, "right") - 1
            sec = idx.astype(np.int64)  # the keys (record numbers) may need 64 bits
            keyed = self.keyed[group]
            sec[keyed] = self.key[np.searchsorted(self.idx, idx[keyed])]
            order[at] = idx[np.lexsort((sec, group, seg))]
            i = j


# --------------------------------------------------------------------------------------
# the assembler


class Assembler:
    """The rows of one frame, gathered chunk by chunk, then placed in time order.

    Rows come in ``groups``: kinds of rows that have different columns (Horovod's spans,
    ticks...; one group ``"rows"`` by default). Storage order is by group, then as added.

    While the file streams: :meth:`add` one chunk's columns of a group, :meth:`add_sparse`
    values that only some rows have. Then :meth:`order` sorts the start times in place,
    and the columns are built with :meth:`empty` and :meth:`place` (or :meth:`column` for a
    column stored as is), :meth:`codes` for category codes, :meth:`sparse` for sparse
    values; :meth:`events` makes the frame. Each piece is freed once it is placed.
    """

    def __init__(self, groups: Sequence[str] = ("rows",)) -> None:
        self.groups = tuple(groups)
        self._pieces: dict[str, dict[str, list[np.ndarray]]] = {g: {} for g in self.groups}
        # per group, per column, the chunks not yet joined into a piece
        self._pending: dict[str, dict[str, list[np.ndarray]]] = {}
        self.sizes = dict.fromkeys(self.groups, 0)
        # sparse columns: per piece, its group, row numbers within it, and values
        self._sparse: dict[str, tuple[list[str], list[np.ndarray], list[np.ndarray]]] = {}
        self._order: TimeOrder | None = None

    # -- while the file streams

    @property
    def n(self) -> int:
        """Rows stored so far (all groups)."""
        return sum(self.sizes.values())

    @property
    def pieces(self) -> dict[str, dict[str, list[np.ndarray]]]:
        """Per group, per column, the stored pieces in storage order."""
        if self._pending:
            self._join_pending()
        return self._pieces

    def add(self, group: str = "rows", **columns: np.ndarray) -> None:
        """Store one chunk's rows of ``group``: one array per column, all of one length.

        Small chunks are joined into pieces of about :data:`BLOCK_ROWS` rows: a decode in
        small blocks (which keeps it in the CPU's caches) does not make the frame building
        walk thousands of tiny pieces."""
        self.sizes[group] += len(next(iter(columns.values())))
        pending = self._pending.get(group)
        if pending is not None and pending.keys() != columns.keys():
            self._join_pending(group)
            pending = None
        if pending is None:
            pending = self._pending[group] = {k: [] for k in columns}
        for name, values in columns.items():
            pending[name].append(values)
        if sum(map(len, next(iter(pending.values())))) >= BLOCK_ROWS:
            self._join_pending(group)

    def _join_pending(self, group: str | None = None) -> None:
        """Store the pending chunks (of ``group``, or of every group) as one piece."""
        for g in [group] if group is not None else list(self._pending):
            columns = self._pending.pop(g)
            pieces = self._pieces[g]
            for name, chunks in columns.items():
                pieces.setdefault(name, []).append(chunks[0] if len(chunks) == 1
                                                   else np.concatenate(chunks))

    def add_sparse(self, name: str, rows: np.ndarray, values: np.ndarray, *,
                   group: str = "rows") -> None:
        """Store values of column ``name`` for some rows of ``group`` (row numbers within
        the group, in storage order); a later value for a row wins."""
        for kept, new in zip(self._sparse.setdefault(name, ([], [], [])), (group, rows, values),
                             strict=True):
            kept.append(new)

    # -- building

    def _first(self, group: str) -> int:
        """Storage index of the group's first row."""
        return sum(self.sizes[g] for g in self.groups[: self.groups.index(group)])

    def _groups(self, groups: str | Iterable[str] | None) -> tuple[str, ...]:
        if groups is None:
            return self.groups
        return (groups,) if isinstance(groups, str) else tuple(groups)

    def scan(self, column: str, groups: str | Iterable[str] | None = None,
             ) -> Iterator[np.ndarray]:
        """Blocks of a stored column (of some groups), in storage order; nothing is freed."""
        for g in self._groups(groups):
            for _, x in _piece_blocks(self.pieces[g].get(column, [])):
                yield x

    def codes(self, column: str, categories: list, *, negative: Sequence[str] = (),
              groups: str | Iterable[str] | None = None,
              convert: Callable[[np.ndarray], np.ndarray] | None = None) -> Codes:
        """New category codes for the stored int codes of ``column``: only the categories
        in use are kept, numbered in the narrowest int type (:func:`code_map`).

        Stored code ``c >= 0`` is ``categories[c]``; the negative codes ``-k .. -1`` are the
        categories ``negative`` (in that order), kept after the others if in use; a code
        below ``-len(negative)`` is missing. ``convert`` maps the stored values to codes
        first (the returned :class:`Codes` applies it too).
        """
        k = len(negative)
        used = np.zeros(len(categories) + k + 1, dtype=bool)
        for x in self.scan(column, groups):
            used[(convert(x) if convert is not None else x) + k + 1] = True
        # code_map's table: slot 0 missing, then categories, then negatives
        remap, kept = code_map(np.concatenate([used[k + 1 :], used[1 : k + 1]]),
                               [*categories, *negative])
        n = len(categories)
        table = np.concatenate([remap[:1], remap[n + 1 :], remap[1 : n + 1]])
        return Codes(table, kept, k + 1, convert)

    def order(self, start: str = "start", *, tie_key: str | None = None,
              offset: int = 0) -> np.ndarray:
        """Put the rows in time order; returns the start column (``start`` + ``offset``).

        Ties keep storage order (by group, then as stored). With ``tie_key``, a column that
        some groups store (say, a record number), tied rows are ordered by (group, key):
        rows of a group without the key keep their storage order.
        """
        release_freed_memory()  # what parsing freed, before the row-length arrays
        start_arr = concat_pieces([p for g in self.groups for p in self.pieces[g].pop(start, [])],
                                  np.int64)
        refine = order = None
        if tie_key is not None:  # the tie keys' work while NumPy sorts in another thread
            firsts = [self._first(g) for g in self.groups]
            keys = [self.pieces[g].pop(tie_key, None) for g in self.groups]
            refine, order = concurrently(lambda: _TieKey(start_arr, firsts, keys),
                                         lambda: sort_stable(start_arr))
        self._order = TimeOrder(start_arr, refine=refine, order=order)
        del refine, order
        if offset:
            start_arr += offset
        return start_arr

    @property
    def size(self) -> int:
        """Rows of the frame (once :meth:`order` has run)."""
        return self._order.n

    def blocks(self) -> list[slice]:
        """Row blocks of the frame (for block-wise work on placed columns)."""
        return list(row_blocks(self.size))

    def empty(self, dtype) -> np.ndarray:
        """An uninitialised output column."""
        return np.empty(self.size, dtype=dtype)

    def rows(self, stored: np.ndarray, group: str | None = None) -> np.ndarray:
        """Output rows of stored rows (row numbers within ``group``, or storage indices)."""
        first = self._first(group) if group is not None else 0
        return self._order.rows(stored + first if first else stored)

    def fill(self, out: np.ndarray | tuple[np.ndarray, ...], groups: str | Iterable[str],
             value: Any | tuple) -> None:
        """Set the rows of ``groups`` in ``out`` to ``value`` (one per output)."""
        outs, values = (out, value) if isinstance(out, tuple) else ((out,), (value,))
        for g in self._groups(groups):
            pos = self._order.pos[self._first(g) : self._first(g) + self.sizes[g]]
            for o, v in zip(outs, values, strict=True):
                o[pos] = v

    def place(self, out: np.ndarray | tuple[np.ndarray, ...], group: str,
              inputs: Sequence[str], fn: Callable[..., Any] | None = None) -> None:
        """Write ``fn(*blocks of inputs)`` to the rows of ``group`` in ``out``, block by
        block, freeing the input pieces as they go.

        With several outputs (a tuple), ``fn`` returns one value per output; without
        ``fn`` the single input is written as is. A value may be a scalar.
        """
        outs = out if isinstance(out, tuple) else (out,)
        pos_all = self._order.pos
        at = self._first(group)
        stored = self.pieces[group]
        for ps in drain(*(stored.pop(c, []) for c in inputs)):
            for b in row_blocks(ps[0].size):
                values = fn(*(p[b] for p in ps)) if fn is not None else ps[0][b]
                if not isinstance(out, tuple):
                    values = (values,)
                pos = pos_all[at + b.start : at + b.stop]
                for o, v in zip(outs, values, strict=True):
                    o[pos] = v
            at += ps[0].size

    def column(self, name: str, dtype, *, fn: Callable[[np.ndarray], Any] | None = None,
               groups: str | Iterable[str] | None = None) -> np.ndarray:
        """A stored column in time order, as is or mapped by ``fn`` (every group must
        store it)."""
        out = self.empty(dtype)
        for g in self._groups(groups):
            self.place(out, g, (name,), fn)
        return out

    def nullable(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(values, missing-mask)`` in time order of a stored int64 column ``name`` whose
        mask is stored as ``name + "_na"``."""
        return self.column(name, np.int64), self.column(name + "_na", bool)

    def sparse(self, name: str, dtype) -> tuple[np.ndarray, np.ndarray]:
        """``(values, missing-mask)`` in time order of the sparse column ``name``: the rows
        no value was given for are missing, and their values are never made resident."""
        release_freed_memory()  # the block temporaries of earlier work, before new pages
        values = lazy_zeros(self.size, dtype)
        mask = np.ones(self.size, dtype=bool)
        groups, rows, vals = self._sparse.pop(name, ([], [], []))
        firsts = [self._first(g) for g in groups]
        for first, (r, v) in zip(firsts, drain(rows, vals), strict=True):
            for b in row_blocks(r.size):
                out = self._order.rows(r[b] + first)
                values[out] = v[b]
                mask[out] = False
        return values, mask

    def sparse_rows(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(output rows, values)`` of the sparse column ``name`` (empty when none)."""
        groups, rows, vals = self._sparse.pop(name, ([], [], []))
        dtype = vals[0].dtype if vals else np.int64
        at = concat_pieces([r + self._first(g) for g, r in zip(groups, rows, strict=True)],
                           np.int64)
        return self.rows(at), concat_pieces(vals, dtype)

    def events(self, **columns: Any) -> pd.DataFrame:
        """The event frame: every column given as built (no copy), a ``str`` or ``int``
        broadcast to a constant column, and ``None`` or a column left out all missing
        (lazily); a plain NumPy array for a nullable integer column has no missing value
        (its mask costs nothing until written). Forgets the positions and whatever was not
        placed."""
        n = self.size
        self._order.release()
        for g in self.groups:
            self.pieces[g].clear()
        self._sparse.clear()
        release_freed_memory()
        out = {}
        for col, dtype in EVENT_COLUMNS.items():
            v = columns.pop(col, None)
            if v is None and col not in ("start_ns", "dur_ns"):
                v = missing(n, dtype)
            elif isinstance(v, str):
                v = const_category(v, n)
            elif isinstance(v, int) and dtype in NP_INT:
                v = pd.arrays.IntegerArray(np.full(n, v, dtype=NP_INT[dtype]),
                                           lazy_zeros(n, bool))
            elif isinstance(v, np.ndarray) and dtype in NP_INT:  # no value missing
                v = pd.arrays.IntegerArray(v, lazy_zeros(n, bool))
            out[col] = v
        if columns:
            raise TypeError(f"not event columns: {sorted(columns)}")
        return make_events(n, copy=False, **out)
