"""One contract for every registered reader, run over its own files (the project's fixtures
in tests/data and, when present, the real corpus in ../shared/corpus).

Every registered reader has fixtures in tests/data (the registry and :data:`OWN_FILES` name
the same readers). For each reader and each of its files: ``sniff`` is true for its own files
and every other reader's ``sniff`` is false; reading twice gives equal frames; the cached
re-read equals the first read; event and sample frames pass ``validate`` and are in time
order (the NCCL-log and topology readers' tables have their own schemas and tests).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pytest

import analysis
from analysis import readers
from analysis.errors import RecoveryWarning

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
CORPUS = ROOT.parent / "shared" / "corpus"

#: Each reader's own files: globs under tests/data and under the corpus.
OWN_FILES: dict[str, tuple[list[str], list[str]]] = {
    "horovod": (["horovod/*.json"], ["horovod_timeline/*.json"]),
    "kineto": (["kineto/*.json", "kineto/*.json.gz"], ["kineto/*.json.gz", "kineto/*/*.json"]),
    "nsys_sqlite": (["nsys/*.sqlite"], ["nsys/*.sqlite"]),
    "nsys_csv": (["nsys/*.csv"], ["nsys/*.csv"]),
    "nvprof_csv": (["nvprof/*.csv"], ["nvprof/*.csv"]),
    "nvprof_sqlite": (["nvprof/*.nvprof", "nvprof/*.nvvp"], ["nvprof/*.nvprof"]),
    "nvml": (["nvml/*.csv"], ["nvml_smi/*.csv"]),
    "scalescope_trace": (["scalescope/**/rank-*.trace.json"], []),
    "scalescope_samples": (["scalescope/**/samples-*.csv"], []),
    "nccl": (["nccl/*.log"], ["nccl/*.log"]),
    "nvsmi_topo": (["topo/*.txt"], ["nccl/*topo*.txt"]),
}

#: Fixtures that are deliberately not regular inputs of their format (damaged files for the
#: bad-input tests, summary reports that are not event traces) carry one of these markers.
NOT_REGULAR = ("bad", "truncated", "corrupt", "empty", "summary", "_sum", "noheader")


def _files() -> list[tuple[str, Path]]:
    out = []
    for name, (own, corpus) in OWN_FILES.items():
        for base, globs in ((DATA, own), (CORPUS, corpus)):
            if not base.is_dir():
                continue
            for g in globs:
                for f in sorted(base.glob(g)):
                    if f.is_file() and not any(m in f.name.lower() for m in NOT_REGULAR):
                        out.append((name, f))
    return out


FILES = _files()


def _id(item: tuple[str, Path]) -> str:
    name, path = item
    where = "corpus" if CORPUS in path.parents else "data"
    return f"{name}:{where}:{path.name}"


def test_every_registered_reader_has_files():
    registered = set(analysis.formats())
    assert set(OWN_FILES) == registered, (
        f"not registered: {set(OWN_FILES) - registered}; "
        f"registered without files in OWN_FILES: {registered - set(OWN_FILES)}")
    with_data = {name for name, path in FILES if DATA in path.parents}
    assert with_data == set(OWN_FILES), f"readers without a fixture in tests/data: {set(OWN_FILES) - with_data}"


@pytest.mark.parametrize("item", FILES, ids=[_id(i) for i in FILES])
def test_reader_contract(item):
    name, path = item
    reg = analysis.formats()
    reader = reg[name]
    assert reader.sniff(path), f"{name}.sniff rejects its own file {path}"
    claimed = [other for other, r in reg.items() if other != name and r.sniff(path)]
    assert not claimed, f"{path} is also claimed by {claimed}"
    assert readers.sniff(path) == name

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecoveryWarning)  # damaged corpus files are tested per format
        first = analysis.read(path, cache=False)
        second = analysis.read(path, format=name, cache=False)
        cached_miss = analysis.read(path, cache=True)
        cached_hit = analysis.read(path, cache=True)
    pd.testing.assert_frame_equal(first, second)
    pd.testing.assert_frame_equal(first, cached_miss)
    pd.testing.assert_frame_equal(first, cached_hit)
    if reader.kind in ("events", "samples"):
        analysis.validate(first)
        time_col = "start_ns" if reader.kind == "events" else "ts_ns"
        assert first[time_col].is_monotonic_increasing
    assert (first["source"] == name).all()
    assert first["run_id"].notna().all()
    cacheable = reader.kind in ("events", "samples")  # the kinds analysis.read caches
    if cacheable and len(cached_hit) > 1:  # a frame re-loaded from the cache is as writable as a parsed one
        for col in cached_hit.columns:
            cached_hit.loc[0, col] = cached_hit.loc[1, col]
        assert cached_hit.iloc[0].equals(first.iloc[1])


def test_unknown_format_names_the_file_and_the_known_formats(tmp_path):
    f = tmp_path / "weird.bin"
    f.write_bytes(b"\x00\x01\x02 not a trace")
    with pytest.raises(analysis.UnknownFormatError, match=r"weird\.bin.*Known formats: .*horovod"):
        analysis.read(f)


@pytest.mark.parametrize("content", [b"", b"   \n"])
def test_empty_inputs_are_clear_errors(tmp_path, content):
    f = tmp_path / "trace.json"
    f.write_bytes(content)
    with pytest.raises(analysis.ReadError, match=r"trace\.json"):
        analysis.read(f)


def test_unknown_format_name_is_rejected(tmp_path):
    f = tmp_path / "x.json"
    f.write_text("[]")
    with pytest.raises(analysis.UnknownFormatError, match="unknown format 'nope'"):
        analysis.read(f, format="nope")
