"""``nvidia-smi topo -m`` matrices (kind ``topo``): the link between every pair of devices.

One row per ordered pair of devices (GPUs and NICs) in the matrix, self pairs left out:
``run_id``, ``source``, ``host`` (from ``host=``, else missing), ``device`` and ``peer``
(labels as printed: ``GPU0``, ``NIC1``, ``mlx5_0``), ``device_kind`` / ``peer_kind``
(``gpu`` or ``nic``), ``link`` (the cell: ``NV12``, ``PIX``, ``PXB``, ``PHB``, ``NODE``,
``SYS``, old ``SOC``), ``n_nvlinks`` (the ``#`` of ``NV#``, else missing), ``link_class``
(``nvlink``, ``pcie-switch`` for PIX/PXB, ``pcie-host-bridge`` for PHB, ``numa-node`` for
NODE, ``cross-socket`` for SYS/SOC), ``nic_name`` (the peer's name from the ``NIC
Legend``, or the label itself when the header names it, e.g. ``mlx5_0``), ``cpu_affinity``
and ``numa_affinity`` of ``device`` (text as printed; missing for NIC rows).

Parsing follows the recipe in docs/formats.md §4 (the `nvidia-smi topo -m` matrix): the header is the
first line containing ``GPU0``; its tokens before ``CPU`` are the device labels; a row is a
line whose first token is a label and that is not the header; the next N tokens are cells;
the matrix ends at the first blank line or ``Legend:``. Any tabs/spaces mix is accepted, and
so are ANSI escapes (the header is underlined). A one-GPU matrix gives an empty frame.
An unknown cell token, or a row with fewer cells than labels (a truncated file), is a
:class:`~analysis.errors.ReadError` naming the file and the line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from analysis._io import head, read_text
from analysis.errors import ReadError, SchemaError
from analysis.readers.registry import default_run_id, register

NAME = "nvsmi_topo"
SUFFIXES = (".txt", ".log", ".out", ".topo")
COLUMNS: dict[str, str] = {
    "run_id": "category", "source": "category", "host": "category", "device": "category",
    "peer": "category", "device_kind": "category", "peer_kind": "category", "link": "category",
    "n_nvlinks": "Int16", "link_class": "category", "nic_name": "category",
    "cpu_affinity": "object", "numa_affinity": "object",
}
_CELL = re.compile(r"^(X|SYS|NODE|PHB|PXB|PIX|SOC|NV\d+)$")
_CLASS = {"PIX": "pcie-switch", "PXB": "pcie-switch", "PHB": "pcie-host-bridge", "NODE": "numa-node",
          "SYS": "cross-socket", "SOC": "cross-socket"}
#: nvidia-smi underlines the header with ANSI escapes (``\x1b[4m ... \x1b[0m``), even
#: into a file (seen with driver 580.159.04, tests/data/topo).
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


def link_class(link: str) -> str:
    """``NV12`` -> ``nvlink``, ``PXB`` -> ``pcie-switch``, ``SYS`` -> ``cross-socket`` ...

    Examples
    --------
    >>> link_class("NV4"), link_class("PHB")
    ('nvlink', 'pcie-host-bridge')
    """
    return "nvlink" if link.startswith("NV") and link[2:].isdigit() else _CLASS.get(link, "unknown")


def sniff(path: Path) -> bool:
    """A text file with a ``GPU0 ...`` header row followed by a ``GPU0`` row of topo cells."""
    path = Path(path)
    if not path.name.lower().endswith(SUFFIXES):
        return False
    text = _ANSI.sub("", head(path, 8192).decode("utf-8", errors="replace"))
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if "GPU0" in ln and "NCCL" not in ln:
            labels = _labels(ln)
            for nxt in lines[i + 1:i + 3]:
                toks = nxt.split()
                if toks and toks[0] == labels[0] and len(toks) > 1 and _CELL.match(toks[1]):
                    return True
            return False
    return False


def _labels(header: str) -> list[str]:
    toks = header.split()
    return toks[: toks.index("CPU")] if "CPU" in toks else toks


def _kind(label: str) -> str:
    return "gpu" if label.startswith("GPU") else "nic"


def read(path: Path, *, run_id: str | None = None, host: str | None = None) -> pd.DataFrame:
    """Read one ``nvidia-smi topo -m`` output.

    Returns
    -------
    pandas.DataFrame
        One row per ordered device pair, columns :data:`COLUMNS` (module docstring).
    """
    path = Path(path)
    lines = _ANSI.sub("", read_text(path)).splitlines()
    start = next((i for i, ln in enumerate(lines) if "GPU0" in ln), None)
    if start is None:
        raise ReadError(path, "no 'GPU0' header: not an nvidia-smi topo -m matrix")
    labels = _labels(lines[start])
    legend = {m[1]: m[2] for ln in lines if (m := _NIC_LEGEND.match(ln))}
    rows = []
    seen = []
    for lineno, ln in enumerate(lines[start + 1:], start=start + 2):
        if not ln.strip() or ln.strip().startswith("Legend"):
            break
        toks = ln.split()
        if toks[0] not in labels:
            raise ReadError(path, f"line {lineno}: row {toks[0]!r} is not one of the header's devices {labels}")
        cells = toks[1:1 + len(labels)]
        if len(cells) < len(labels) or not all(_CELL.match(c) for c in cells):
            bad = next((c for c in cells if not _CELL.match(c)), None)
            why = f"unknown link {bad!r}" if bad else f"{len(cells)} cells for {len(labels)} devices (truncated?)"
            raise ReadError(path, f"line {lineno}: {why}")
        rest = toks[1 + len(labels):]
        dev = toks[0]
        seen.append(dev)
        for peer, cell in zip(labels, cells, strict=True):
            if peer == dev or cell == "X":
                continue
            rows.append({
                "device": dev, "peer": peer, "device_kind": _kind(dev), "peer_kind": _kind(peer), "link": cell,
                "n_nvlinks": int(cell[2:]) if link_class(cell) == "nvlink" else None, "link_class": link_class(cell),
                "nic_name": legend.get(peer, peer) if _kind(peer) == "nic" else None,
                "cpu_affinity": rest[0] if rest and _kind(dev) == "gpu" else None,
                "numa_affinity": rest[1] if len(rest) > 1 and _kind(dev) == "gpu" else None,
            })
    missing = [lab for lab in labels if lab not in seen]
    if missing:
        raise ReadError(path, f"no row for {missing} (truncated matrix?)")
    df = pd.DataFrame(rows, columns=[c for c in COLUMNS if c not in ("run_id", "source", "host")])
    n = len(df)
    df.insert(0, "host", pd.Categorical([host] * n))
    df.insert(0, "source", pd.Categorical([NAME] * n))
    df.insert(0, "run_id", pd.Categorical([run_id or default_run_id(path)] * n))
    df = df.astype(COLUMNS)
    validate(df)
    return df


def validate(df: pd.DataFrame) -> None:
    """Check the topo frame's columns and dtypes (:data:`COLUMNS`); raises SchemaError."""
    for col, dtype in COLUMNS.items():
        if col not in df.columns:
            raise SchemaError(f"topo frame: missing column {col!r}")
        if str(df[col].dtype) != dtype:
            raise SchemaError(f"topo frame: column {col!r} is {df[col].dtype}, expected {dtype}")


register(NAME, sniff=sniff, read=read, kind="topo", suffixes=SUFFIXES,
         description="nvidia-smi topo -m matrix: link type per GPU/NIC pair")
