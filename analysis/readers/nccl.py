"""NCCL debug logs (``NCCL_DEBUG=INFO``; kind ``nccl``): what a run's communicators used.

One row per fact the log states, in file order (``line``), with a ``record`` naming the
kind of fact (the full column list is in docs/schema.md, "NCCL debug logs"):

* ``version``: ``NCCL version X`` (bare, printed by rank 0 through 2.21; or an INFO line per
  process from 2.22);
* ``comm``: ``comm 0x.. rank R nranks N cudaDev D ... - Init START|Init COMPLETE|Abort
  COMPLETE|Destroy COMPLETE`` (``text`` is the state), the topology line ``nRanks N nNodes M
  localRanks L localRank l`` (2.20+; ``text`` ``topology``) and ``Init timings`` (``text``
  ``timings``), which is the only communicator line of logs that start mid-init;
* ``connection``: one per ``via`` line (``Channel NN/c : a[x] -> b[y] [send|receive] via T``;
  the old ``Ring NN : ...`` form of 2.3-2.6 too). ``rank`` is the rank that printed it (the
  sender of P2P/SHM/``[send]``; the receiver of ``[receive]``) and ``peer`` the other end;
  ``transport`` is the normalised class (``P2P/IPC``, ``P2P/CUMEM``, ``P2P/direct``,
  ``P2P/MNNVL``, ``P2P/indirect``, ``SHM``, ``NET/IB``, ``NET/Socket``, ``NET/OFI``
  (aws-ofi-nccl, EFA or other libfabric providers), ``NET/<name>`` for other plug-ins,
  ``CollNet``), ``via`` the text as printed, ``net``/``net_dev``/``gdrdma`` the NET parts;
* ``ring``: the ring-order header ``Channel NN/MM : 0 1 2 3`` (rank 0 only; ``n_channels`` =
  MM, ``text`` = the order) and the GRAPH lines ``Ring NN : prev -> rank -> next``;
* ``tree``: one row per channel of a ``Trees [c] ...`` line (``text`` = the item, ``rank``
  the rank in its middle) and the GRAPH lines ``Tree c : up -> rank -> downs``;
* ``channels``: ``N coll channels, ... M nvls channels ...`` (``n_channels`` = N,
  ``n_nvls_channels`` = M);
* ``network``: ``Using network X`` (``net`` = X); ``ib``: ``NET/IB : Using [0]mlx5_0:1/IB``
  or ``NET/IB : No device found.`` (``text``); ``env``: ``NCCL_X set by environment to Y``
  (``text`` ``NCCL_X=Y``);
* ``warn``: every ``NCCL WARN`` line (``text`` = the message, ``via`` unused).

Per-process values are filled onto every row of that process: ``nccl_version`` (the
process's INFO version line, else the file's bare version line), and for rows that name a
rank, ``comm``/``comm_id``/``nranks``/``n_nodes``/``local_rank``/``local_ranks`` from that
rank's communicator lines in the same process (the nearest earlier one; a later one when
the log starts mid-init).

Recoveries (each one :class:`~analysis.errors.RecoveryWarning` with a count): fragments of
lines spliced by interleaved output are skipped; host names garbled by a splice (a token
whose pid belongs to exactly one other, more frequent host that it is a prefix- or
suffix-extension of) are repaired; a last line without its newline (a truncated log) is
parsed as far as it goes. A file with no NCCL line at all is a
:class:`~analysis.errors.ReadError`.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from analysis._io import head, read_text
from analysis.errors import ReadError, RecoveryWarning, SchemaError
from analysis.readers.registry import default_run_id, register

NAME = "nccl"
SUFFIXES = (".log", ".txt", ".out", ".err")

#: Column -> dtype of the frame :func:`read` returns (documented in docs/schema.md).
COLUMNS: dict[str, str] = {
    "run_id": "category", "source": "category", "line": "int64", "record": "category",
    "host": "category", "pid": "Int64", "tid": "Int64", "device": "Int16",
    "comm": "category", "comm_id": "category", "rank": "Int32", "nranks": "Int32",
    "n_nodes": "Int32", "local_rank": "Int32", "local_ranks": "Int32",
    "nccl_version": "category", "channel": "Int16", "n_channels": "Int16",
    "n_nvls_channels": "Int16", "peer": "Int32", "direction": "category",
    "transport": "category", "via": "category", "net": "category", "net_dev": "Int16",
    "gdrdma": "boolean", "text": "object",
}
RECORDS = ("version", "comm", "connection", "ring", "tree", "channels", "network", "ib", "env", "warn")

# docs/formats.md §3.2: search, never anchor; whatever precedes is an outer prefix (mpirun tag,
# indentation, timestamp). The location part (WARN/TRACE) must not swallow another prefix.
_PREFIX = re.compile(
    r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) (?:\[(?P<dev>-?\d+)\] )?(?:\d+\.\d+ )?"
    r"(?:(?P<loc>(?:(?!NCCL )[^\n])+?):\d+(?: \([^)]*\))? )?NCCL (?P<lvl>INFO|WARN|TRACE|CALL|ABORT) ")
#: A prefix whose host (and the head of its pid) another process's output cut off.
_HOSTLESS = re.compile(r"^\s*(?P<pid>\d+):(?P<tid>\d+) (?:\[(?P<dev>-?\d+)\] )?NCCL (?P<lvl>INFO|WARN) ")
_FRAGMENT = re.compile(r"^\S*\] via |NCCL (?:INFO|WARN) ")
_BARE_VERSION = re.compile(r"NCCL version (\S+)")
_COMM = re.compile(
    r"comm (?P<ptr>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>-?\d+)"
    r"(?:.*? commId (?P<cid>0x[0-9a-fA-F]+))?.*?-\s*(?P<state>Init START|Init COMPLETE|Abort COMPLETE|"
    r"Destroy COMPLETE)")
_TOPOLOGY = re.compile(
    r"comm (?P<ptr>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes (?P<nodes>\d+) "
    r"localRanks (?P<lranks>\d+) localRank (?P<lrank>\d+)")
_TIMINGS = re.compile(r"Init timings(?: -|:) ?\S*:? rank (?P<rank>\d+) nranks (?P<nranks>\d+)")
_CONN = re.compile(
    r"^(?:Channel|Ring) (?P<ch>\d+)(?:/(?P<ci>\d+))? : (?P<a>\d+)(?:\[[^\]]*\])? -> (?P<b>\d+)(?:\[[^\]]*\])?"
    r"(?: \[(?P<dir>send|receive)\])? via (?P<via>.+?)\s*$")
_COLLNET = re.compile(r"^CollNet (?P<ch>\d+)/\d+ : (?P<a>\d+) \[(?P<dir>send|receive)\] via (?P<via>.+?)\s*$")
_RING_HEADER = re.compile(r"^(?:Channel|Ring) (?P<ch>\d+)(?:/(?P<mm>\d+))? :(?P<order>(?: +-?\d+)+)\s*(?:\.\.\.)?\s*$")
_GRAPH_RING = re.compile(r"^Ring (?P<ch>\d+) : (?P<prev>-?\d+) -> (?P<rank>\d+) -> (?P<next>-?\d+)\s*$")
_GRAPH_TREE = re.compile(r"^Tree (?P<ch>\d+) : (?P<up>-?\d+) -> (?P<rank>\d+) -> (?P<down>[-\d/]+)\s*$")
_TREE_ITEM = re.compile(r"\[(?P<ch>\d+)\] (?P<item>\S+)")
_TREE_FULL = re.compile(r"^[-\d/]+->-?\d+->[-\d/]+(?:\|[-\d/]+->-?\d+->[-\d/]+)?$")
#: NCCL formats each line in a 1024-byte buffer: a longer one is cut (docs/formats.md §3.1).
CUT_LINE_LEN = 1023
_CHANNELS = re.compile(r"^(?P<n>\d+) coll channels,(?:.*?(?P<nvls>\d+) nvls channels)?")
_NETWORK = re.compile(r"^Using network (?P<net>.+?)\s*$")
_IB = re.compile(r"^NET/IB ?: ?(?P<what>.*?)\s*$")
_ENV = re.compile(r"^(?P<var>NCCL_\w+) set by environment to (?P<val>.*?)\.?\s*$")
_NET_VIA = re.compile(r"^NET/(?P<net>.+?)/(?P<dev>\d+)(?:\(\d+\))?(?P<flags>(?:/GDRDMA|\(PCI\)|/Shared)*)$")


def sniff(path: Path) -> bool:
    """A text log whose first 64 KiB hold a ``host:pid:tid [dev] NCCL INFO|WARN`` line."""
    path = Path(path)
    if not path.name.lower().removesuffix(".gz").endswith(SUFFIXES):
        return False
    text = head(path, 1 << 16).decode("utf-8", errors="replace")
    return any(_PREFIX.search(ln) for ln in text.splitlines() if "NCCL " in ln)


def transport_class(via: str) -> str:
    """Normalise the text after ``via`` to a transport class (see the module docstring).

    Examples
    --------
    >>> transport_class("P2P/direct pointer/read"), transport_class("NET/AWS Libfabric/1/GDRDMA")
    ('P2P/direct', 'NET/OFI')
    >>> transport_class("NET/IB/0/GDRDMA"), transport_class("SHM/direct/direct")
    ('NET/IB', 'SHM')
    """
    v = via.strip()
    if v.startswith("P2P/"):
        kind = v[4:].split("/")[0]
        return "P2P/direct" if kind.startswith("direct") else f"P2P/{kind}"
    if v.startswith("SHM") or "shared memory" in v:
        return "SHM"
    if v.upper().startswith("COLLNET"):
        return "CollNet"
    if v.startswith("NVLS"):
        return "NVLS"
    m = _NET_VIA.match(v)
    name = m["net"] if m else v[4:].split("/")[0] if v.startswith("NET/") else v
    low = name.lower()
    if low.startswith("ib") or "rdma_sharp" in low:
        return "NET/IB"
    if low.startswith("socket"):
        return "NET/Socket"
    if "libfabric" in low or "ofi" in low or "efa" in low:
        return "NET/OFI"
    return f"NET/{name}"


def _row(lineno: int, record: str, pre: re.Match | None, **values: object) -> dict:
    row = {"line": lineno, "record": record}
    if pre is not None:
        row.update(host=pre.groupdict().get("host"), pid=int(pre["pid"]), tid=int(pre["tid"]),
                   device=None if pre["dev"] is None else int(pre["dev"]))
    row.update(values)
    return row


#: Placeholder host of a record whose prefix lost its host (see :data:`_HOSTLESS`).
_CUT = "\x00cut"


def _parse_message(lineno: int, pre: re.Match, msg: str) -> list[dict]:
    if pre["lvl"] == "WARN":
        return [_row(lineno, "warn", pre, text=msg.strip())]
    if pre["lvl"] != "INFO":
        return []
    msg = msg.strip()
    if m := _CONN.match(msg):
        a, b, d = int(m["a"]), int(m["b"]), m["dir"]
        rank, peer = (b, a) if d == "receive" else (a, b)
        via = m["via"]
        nv = _NET_VIA.match(via)
        return [_row(lineno, "connection", pre, channel=int(m["ch"]), rank=rank, peer=peer,
                     direction="recv" if d == "receive" else "send", transport=transport_class(via), via=via,
                     net=nv["net"] if nv else None, net_dev=int(nv["dev"]) if nv else None,
                     gdrdma=("/GDRDMA" in via) if via.startswith("NET/") else None)]
    if m := _COLLNET.match(msg):
        return [_row(lineno, "connection", pre, channel=int(m["ch"]), rank=int(m["a"]),
                     direction="recv" if m["dir"] == "receive" else "send", transport="CollNet", via=m["via"])]
    if m := _GRAPH_RING.match(msg):
        return [_row(lineno, "ring", pre, channel=int(m["ch"]), rank=int(m["rank"]),
                     text=f"{m['prev']} -> {m['rank']} -> {m['next']}")]
    if m := _RING_HEADER.match(msg):
        return [_row(lineno, "ring", pre, channel=int(m["ch"]), rank=0,
                     n_channels=None if m["mm"] is None else int(m["mm"]), text=" ".join(m["order"].split()))]
    if msg.startswith("Trees"):
        out = []
        for it in _TREE_ITEM.finditer(msg):
            if not _TREE_FULL.match(it["item"]):  # the item NCCL's line buffer cut
                out.append({"line": lineno, "record": "_cut"})
                continue
            parts = it["item"].split("->")
            rank = int(parts[1]) if len(parts) >= 3 and parts[1].lstrip("-").isdigit() else None
            out.append(_row(lineno, "tree", pre, channel=int(it["ch"]), rank=rank, text=it["item"]))
        return out
    if m := _GRAPH_TREE.match(msg):
        return [_row(lineno, "tree", pre, channel=int(m["ch"]), rank=int(m["rank"]),
                     text=f"{m['up']} -> {m['rank']} -> {m['down']}")]
    if m := _TOPOLOGY.search(msg):
        return [_row(lineno, "comm", pre, comm=m["ptr"], rank=int(m["rank"]), nranks=int(m["nranks"]),
                     n_nodes=int(m["nodes"]), local_ranks=int(m["lranks"]), local_rank=int(m["lrank"]),
                     text="topology")]
    if m := _COMM.search(msg):
        return [_row(lineno, "comm", pre, comm=m["ptr"], comm_id=m["cid"], rank=int(m["rank"]),
                     nranks=int(m["nranks"]), text=m["state"])]
    if m := _TIMINGS.search(msg):
        return [_row(lineno, "comm", pre, rank=int(m["rank"]), nranks=int(m["nranks"]), text="timings")]
    if m := _CHANNELS.match(msg):
        return [_row(lineno, "channels", pre, n_channels=int(m["n"]),
                     n_nvls_channels=None if m["nvls"] is None else int(m["nvls"]), text=msg)]
    if m := _NETWORK.match(msg):
        return [_row(lineno, "network", pre, net=m["net"])]
    if m := _IB.match(msg):
        return [_row(lineno, "ib", pre, text=m["what"])]
    if m := _ENV.match(msg):
        return [_row(lineno, "env", pre, text=f"{m['var']}={m['val']}")]
    if m := _BARE_VERSION.match(msg):
        return [_row(lineno, "version", pre, nccl_version=m[1])]
    return []


def _parse(text: str) -> tuple[list[dict], int]:
    """Rows of every NCCL message in ``text`` and the number of unparsable fragments."""
    rows: list[dict] = []
    fragments = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        if "NCCL" not in line and " via " not in line:
            continue
        matches = list(_PREFIX.finditer(line))
        if not matches:
            if m := _BARE_VERSION.search(line):
                rows.append(_row(lineno, "version", None, nccl_version=m[1]))
            elif m := _HOSTLESS.match(line):  # host restored by _repair_hosts when it can be
                found = _parse_message(lineno, m, line[m.end():])
                rows.extend({**r, "host": _CUT} for r in found)
            elif _FRAGMENT.search(line):
                fragments += 1  # the tail of a line another process's output cut in two
            continue
        for i, pre in enumerate(matches):  # spliced lines hold several prefixes
            end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
            rows.extend(_parse_message(lineno, pre, line[pre.end():end]))
    return rows, fragments


def _repair_hosts(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Map host tokens garbled by a splice (``3x3207c0s25b1n0``, ``n0``) onto the real host,
    and give prefixes that lost their host (``787134:3787256 [1] NCCL INFO``) the one
    process whose pid ends in those digits and that has that thread; drop those that match
    no process or several."""
    counts = Counter(zip(df["host"], df["pid"], strict=True))
    by_pid: dict[int, list[str]] = defaultdict(list)
    for (h, p) in counts:
        if isinstance(h, str) and h != _CUT:
            by_pid[p].append(h)
    fix: dict[tuple[str, int], str] = {}
    for (h, p), n in counts.items():
        if not isinstance(h, str) or h == _CUT:
            continue
        cands = [o for o in by_pid[p] if o != h and counts[(o, p)] > n and (h.endswith(o) or o.endswith(h))]
        if len(cands) == 1:
            fix[(h, p)] = cands[0]
    threads = {(h, p, t) for h, p, t in zip(df["host"], df["pid"], df["tid"], strict=True) if h != _CUT}
    hosts, pids, keep = df["host"].tolist(), df["pid"].tolist(), np.ones(len(df), bool)
    cut_fixed = cut_lost = 0
    for i, (h, p, t) in enumerate(zip(hosts, pids, df["tid"], strict=True)):
        if h == _CUT:
            cands = {(hh, pp) for hh, pp, tt in threads if tt == t and str(pp).endswith(str(p))}
            if len(cands) == 1:
                hosts[i], pids[i] = cands.pop()
                cut_fixed += 1
            else:
                keep[i] = False
                cut_lost += 1
        elif (h, p) in fix:
            hosts[i] = fix[(h, p)]
    df["host"], df["pid"] = hosts, pids
    if fix:
        n = sum(counts[k] for k in fix)
        shown = ", ".join(f"{h!r}->{v!r}" for (h, _), v in sorted(fix.items()))
        warnings.warn(f"{path}: repaired the host of {n} record(s) garbled by interleaved output ({shown})",
                      RecoveryWarning, stacklevel=4)
    if cut_fixed or cut_lost:
        warnings.warn(f"{path}: {cut_fixed + cut_lost} record(s) whose line lost its host to interleaved output: "
                      f"{cut_fixed} given the one process with that pid tail and thread, {cut_lost} dropped",
                      RecoveryWarning, stacklevel=4)
    return df[keep].reset_index(drop=True) if cut_lost else df


def _fill_process_values(df: pd.DataFrame) -> pd.DataFrame:
    """Version per process; communicator values per (host, pid, rank)."""
    bare = df.loc[df["record"].eq("version") & df["host"].isna(), "nccl_version"]
    file_version = bare.iloc[0] if len(bare) else None
    versions = (df[df["record"].eq("version") & df["host"].notna()]
                .groupby(["host", "pid"], sort=False)["nccl_version"].first().to_dict())
    df["nccl_version"] = [versions.get((h, p), file_version) if isinstance(h, str) else v
                          for h, p, v in zip(df["host"], df["pid"], df["nccl_version"], strict=True)]
    comm_cols = ("comm", "comm_id", "nranks", "n_nodes", "local_rank", "local_ranks")
    comms = df[df["record"].eq("comm")]
    info: dict[tuple, list[tuple[int, dict]]] = defaultdict(list)
    ptr_info: dict[tuple, dict] = defaultdict(dict)
    for r in comms.itertuples(index=False):
        key = (r.host, r.pid, r.rank)
        vals = {c: getattr(r, c) for c in comm_cols if not pd.isna(getattr(r, c))}
        if r.comm is not None and not pd.isna(r.comm):
            ptr_info[(r.host, r.pid, r.comm)].update(vals)
        info[key].append((r.line, vals))
    out = {c: df[c].tolist() for c in comm_cols}
    for i, r in enumerate(df.itertuples(index=False)):
        if pd.isna(r.rank) or not isinstance(r.host, str):
            continue
        entries = info.get((r.host, r.pid, r.rank))
        if not entries:
            continue
        before = [v for ln, v in entries if ln <= r.line]
        chosen = dict(entries[0][1]) if not before else {}
        for v in before:
            chosen.update(v)
        ptr = chosen.get("comm")
        if ptr is not None:
            chosen = {**ptr_info.get((r.host, r.pid, ptr), {}), **chosen}
        for c in comm_cols:
            if c in chosen and pd.isna(out[c][i]):
                out[c][i] = chosen[c]
    for c in comm_cols:
        df[c] = out[c]
    return df


def _frame(rows: list[dict], run_id: str) -> pd.DataFrame:
    data = {}
    n = len(rows)
    for col, dtype in COLUMNS.items():
        if col in ("run_id", "source"):
            continue
        vals = [r.get(col) for r in rows]
        if dtype == "category":
            data[col] = pd.Categorical([None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)
                                        for v in vals])
        elif dtype == "object":
            data[col] = pd.Series(vals, dtype=object)
        else:
            data[col] = pd.array([None if v is None or (isinstance(v, float) and np.isnan(v)) else v for v in vals],
                                 dtype=dtype)
    df = pd.DataFrame(data)
    df.insert(0, "source", pd.Categorical([NAME] * n))
    df.insert(0, "run_id", pd.Categorical([run_id] * n))
    df["record"] = df["record"].cat.set_categories(RECORDS)
    return df[list(COLUMNS)]


def read(path: Path, *, run_id: str | None = None) -> pd.DataFrame:
    """Read one NCCL debug log (several processes interleaved are fine).

    Returns
    -------
    pandas.DataFrame
        One row per recorded fact, columns :data:`COLUMNS` (see the module docstring and
        docs/schema.md), in file order.

    Raises
    ------
    ReadError
        When the file holds no NCCL line.
    """
    path = Path(path)
    text = read_text(path)
    rows, fragments = _parse(text)
    if not rows:
        raise ReadError(path, "no NCCL debug line (host:pid:tid [dev] NCCL INFO|WARN ...) found")
    if fragments:
        warnings.warn(f"{path}: skipped {fragments} line fragment(s) without a NCCL prefix (output of several "
                      "processes interleaved mid-line)", RecoveryWarning, stacklevel=3)
    if not text.endswith("\n"):
        last = text.rsplit("\n", 1)[-1]
        warnings.warn(f"{path}: the last line has no newline (log truncated?); read up to line "
                      f"{text.count(chr(10)) + 1}: {last[:80]!r}", RecoveryWarning, stacklevel=3)
    rows = _checked(rows, path)
    cut = [r["line"] for r in rows if r["record"] == "_cut"]
    if cut:
        rows = [r for r in rows if r["record"] != "_cut"]
        warnings.warn(f"{path}: {len(cut)} Trees item(s) cut off where NCCL's {CUT_LINE_LEN + 1}-byte line buffer "
                      f"ended (line(s) {', '.join(map(str, cut[:5]))}); the channels after them are not listed",
                      RecoveryWarning, stacklevel=3)
    df = pd.DataFrame(rows, columns=[c for c in COLUMNS if c not in ("run_id", "source")], dtype=object)
    df = df.where(pd.notna(df), None)
    df = _repair_hosts(df, path)
    df = _fill_process_values(df)
    out = _frame(df.to_dict("records"), run_id or default_run_id(path))
    validate(out)
    return out


#: Integer fields of a record and their upper bounds (all are >= 0): ids fit int64, the
#: ranks, devices and counts int32.
_INT_LIMITS = {"pid": 2**63, "tid": 2**63, **dict.fromkeys(
    ("device", "channel", "rank", "peer", "nranks", "n_nodes", "local_rank", "local_ranks", "n_channels",
     "n_nvls_channels", "net_dev"), 2**31)}


def _checked(rows: list[dict], path: Path) -> list[dict]:
    """The records whose numbers are in range (and whose ``rank`` is below the ``nranks``
    of the same line); the others are dropped, counted in one warning naming the first."""
    kept, bad = [], []
    for r in rows:
        wrong = next((f"{k} {r[k]}" for k, hi in _INT_LIMITS.items()
                      if isinstance(r.get(k), int) and not 0 <= r[k] < hi), None)
        if wrong is None and isinstance(r.get("rank"), int) and isinstance(r.get("nranks"), int) \
                and r["rank"] >= r["nranks"]:
            wrong = f"rank {r['rank']} with nranks {r['nranks']}"
        if wrong is None:
            kept.append(r)
        else:
            bad.append((r["line"], wrong))
    if bad:
        warnings.warn(f"{path}: dropped {len(bad)} record(s) with a number out of range (the first: line "
                      f"{bad[0][0]}, {bad[0][1]})", RecoveryWarning, stacklevel=4)
    return kept


def validate(df: pd.DataFrame) -> None:
    """Check that ``df`` has the NCCL columns and dtypes (:data:`COLUMNS`).

    Raises
    ------
    SchemaError
        Naming the first missing column or wrong dtype.
    """
    for col, dtype in COLUMNS.items():
        if col not in df.columns:
            raise SchemaError(f"NCCL frame: missing column {col!r}")
        if str(df[col].dtype) != dtype:
            raise SchemaError(f"NCCL frame: column {col!r} is {df[col].dtype}, expected {dtype}")
    bad = set(df["record"].dropna().unique()) - set(RECORDS)
    if bad:
        raise SchemaError(f"NCCL frame: unknown record kinds {sorted(bad)}")


register(NAME, sniff=sniff, read=read, kind="nccl", suffixes=SUFFIXES,
         description="NCCL_DEBUG=INFO log: communicators, per-channel transports, rings, trees, WARN lines")
