"""Hostile inputs against every reader, as properties (issue 16).

The damaged files are made at test time from the project's own fixtures (tests/data) and,
when present, the small files of the real corpus (../shared/corpus, read in place, never
copied into the repository): truncated, bit-flipped, with bytes replaced or inserted (an
invalid UTF-8 byte, a lone surrogate escape, a huge number, deep nesting, NUL), wrapped in a
gzip stream that is then cut or whose CRC is broken.

For every reader and every such file, ``analysis.read`` (sniffed and with the format named)
must end in one of three ways:

* a frame that passes the schema (``validate_events`` / ``validate_samples``), with or
  without a :class:`~analysis.errors.RecoveryWarning` saying what was dropped;
* a :class:`~analysis.errors.ScalescopeError` whose message names the file;

never another exception from inside a parser, and never a hang (every test has a timeout).
"""

from __future__ import annotations

import gzip
import os
import warnings
import zlib
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import analysis  # noqa: E402
from analysis import readers, schema  # noqa: E402
from analysis.errors import ScalescopeError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
CORPUS = Path(os.environ.get("SCALESCOPE_CORPUS", ROOT.parent / "shared" / "corpus"))

#: Seed files per reader: globs under tests/data, then under the corpus (small files only).
SEEDS: dict[str, tuple[list[str], list[str]]] = {
    "nsys_sqlite": (["nsys/*.sqlite"], []),
    "nsys_csv": (["nsys/cuda_gpu_trace.csv", "nsys/nvtx_pushpop_trace.csv"], ["nsys/*.csv"]),
    "nvprof_csv": (["nvprof/gpu_trace.csv", "nvprof/two_processes.csv"], ["nvprof/*.csv"]),
    "nvprof_sqlite": (["nvprof/*.nvprof"], []),
    "nvml": (["nvml/smi_units.csv", "nvml/degree_header.csv"], ["nvml_smi/*.csv"]),
    "nccl": (["nccl/*.log"], []),
    "horovod": (["horovod/tiny_timeline.json", "horovod/unterminated_v019.json"], ["horovod_timeline/*.json"]),
    "kineto": (["kineto/*.json", "kineto/*.json.gz"], ["kineto/*.json.gz"]),
    "scalescope_trace": (["scalescope/**/rank-00000.trace.json"], []),
    "scalescope_samples": (["scalescope/**/samples-*.csv"], []),
    "nvsmi_topo": (["topo/*.txt"], []),
}
#: Every built-in reader of events or samples (and the NCCL-log and topology readers).
READERS = tuple(SEEDS)
MAX_CORPUS_BYTES = 256 * 1024
#: CI runs a fixed, modest set of examples; ``SCALESCOPE_FUZZ_EXAMPLES=2000
#: SCALESCOPE_FUZZ_RANDOM=1`` searches longer and differently on each run.
EXAMPLES = int(os.environ.get("SCALESCOPE_FUZZ_EXAMPLES", "40"))
RANDOM = os.environ.get("SCALESCOPE_FUZZ_RANDOM") == "1"

#: Snippets inserted into a file: invalid UTF-8, a lone surrogate escape, huge and negative
#: numbers, JSON nulls and nesting, NUL, a CSV field separator and a line break.
NASTY = [b"\xff", b"\\ud800", b"1e300", b"9.3e18", b"-1", b"null", b"[" * 64, b"\x00", b"NaN", b",", b"\n",
         b'"', b"\xc3"]


def _seeds(name: str) -> list[Path]:
    own, corpus = SEEDS[name]
    out = [f for g in own for f in sorted(DATA.glob(g)) if f.is_file()]
    if CORPUS.is_dir():
        out += [f for g in corpus for f in sorted(CORPUS.glob(g))
                if f.is_file() and f.stat().st_size <= MAX_CORPUS_BYTES][:3]
    return out


SEED_FILES = {name: _seeds(name) for name in READERS}


def _outcome(path: Path, fmt: str | None) -> str:
    """Read ``path`` and check the three-way rule; returns "frame", "warned" or "error"."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            df = analysis.read(path, fmt, cache=False)
        except ScalescopeError as exc:
            assert str(path) in str(exc) or path.name in str(exc), f"error does not name the file: {exc}"
            return "error"
    reader = readers.formats()[fmt or readers.sniff(path)]
    if reader.kind == "events":
        schema.validate_events(df)
    elif reader.kind == "samples":
        schema.validate_samples(df)
    return "warned" if any(issubclass(w.category, UserWarning) for w in caught) else "frame"


def _mutate(raw: bytes, op: str, pos: float, byte: int, snippet: bytes) -> bytes:
    if not raw:
        return snippet
    i = min(int(pos * len(raw)), len(raw) - 1)
    if op == "truncate":
        return raw[:i]
    if op == "flip":
        return raw[:i] + bytes([raw[i] ^ (1 << (byte % 8))]) + raw[i + 1:]
    if op == "replace":
        return raw[:i] + bytes([byte]) + raw[i + 1:]
    if op == "insert":
        return raw[:i] + snippet + raw[i:]
    if op == "delete":
        return raw[:i] + raw[i + 1 + byte % 64:]
    if op == "gzip-cut":
        z = gzip.compress(raw)
        return z[: max(10, int(pos * len(z)))]
    if op == "gzip-crc":
        z = bytearray(gzip.compress(raw))
        z[-8] ^= 0xFF
        return bytes(z)
    raise AssertionError(op)


OPS = ("truncate", "flip", "replace", "insert", "delete", "gzip-cut", "gzip-crc")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", READERS)
@settings(max_examples=EXAMPLES, deadline=None, derandomize=not RANDOM, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_files_give_a_frame_a_warning_or_an_error_naming_the_file(name, tmp_path, data):
    seeds = SEED_FILES[name]
    if not seeds:
        pytest.skip(f"no seed files for {name}")
    seed = data.draw(st.sampled_from(seeds), label="seed")
    op = data.draw(st.sampled_from(OPS), label="op")
    pos = data.draw(st.floats(0, 1), label="pos")
    byte = data.draw(st.integers(0, 255), label="byte")
    snippet = data.draw(st.sampled_from(NASTY), label="snippet")
    damaged = _mutate(seed.read_bytes(), op, pos, byte, snippet)
    path = tmp_path / f"damaged-{op}{''.join(seed.suffixes)}"
    if op.startswith("gzip") and not path.name.endswith(".gz"):
        path = path.with_name(path.name + ".gz")
    path.write_bytes(damaged)
    _outcome(path, None)
    _outcome(path, name)


@pytest.mark.parametrize("name", READERS)
def test_every_seed_reads_whole(name):
    """The seeds themselves read without error (else the mutations test nothing)."""
    for seed in SEED_FILES[name]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert _outcome(seed, name) in ("frame", "warned")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", READERS)
def test_foreign_and_degenerate_files(name, tmp_path):
    """Empty, one byte, only a newline, binary noise, another format's file, and every format's
    seeds read with this reader named: the three-way rule."""
    cases = {"empty.txt": b"", "one.txt": b"x", "nl.txt": b"\n", "noise.bin": bytes(range(256)) * 4,
             "bom.csv": b"\xef\xbb\xbf\n", "gz.gz": gzip.compress(b""), "zlib.gz": zlib.compress(b"abc")}
    for fname, raw in cases.items():
        p = tmp_path / fname
        p.write_bytes(raw)
        _outcome(p, name)
    for other in READERS:
        for seed in SEED_FILES[other][:2]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _outcome(seed, name)


@pytest.mark.parametrize("name", READERS)
def test_api_misuse_is_a_clear_error(name, tmp_path):
    seeds = SEED_FILES[name]
    if not seeds:
        pytest.skip(f"no seed files for {name}")
    with pytest.raises(ScalescopeError, match="unknown format 'bogus'"):
        analysis.read(seeds[0], "bogus")
    with pytest.raises((TypeError, ValueError)):
        analysis.read(seeds[0], name, no_such_option=1)
