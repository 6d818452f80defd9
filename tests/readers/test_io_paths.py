"""Paths that are not plain readable files are refused with a ReadError naming the real
problem, and never opened (a FIFO would block forever) -- issue 16, part 1 and 3."""

from __future__ import annotations

import gzip
import os

import pytest

from analysis import _io
from analysis import read as read_file
from analysis.errors import ReadError

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


@needs_fifo
@pytest.mark.timeout(30)
@pytest.mark.parametrize("fmt", ["kineto", "horovod", "nvml", "scalescope_trace", "nsys_sqlite"])
def test_fifo_is_refused_not_opened(tmp_path, fmt):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    with pytest.raises(ReadError, match=r"FIFO.*not a regular file"):
        read_file(fifo, fmt)
    assert _io.head(fifo) == b""


def test_symlink_loop_and_broken_link(tmp_path):
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    with pytest.raises(ReadError, match="symbolic link loop"):
        _io.read_bytes(loop)
    broken = tmp_path / "broken.json"
    broken.symlink_to(tmp_path / "nowhere.json")
    with pytest.raises(ReadError, match="broken symbolic link"):
        _io.read_bytes(broken)


def test_device_and_directory(tmp_path):
    if os.path.exists("/dev/null"):
        with pytest.raises(ReadError, match="character device"):
            _io.read_bytes("/dev/null")
    with pytest.raises(ReadError, match="is a directory"):
        _io.read_bytes(tmp_path)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_and_directory(tmp_path):
    f = tmp_path / "a.json"
    f.write_text("[]")
    f.chmod(0)
    with pytest.raises(ReadError, match="permission denied"):
        _io.read_bytes(f)
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "b.json").write_text("[]")
    sub.chmod(0)
    try:
        with pytest.raises(ReadError, match="permission denied"):
            _io.read_bytes(sub / "b.json")
    finally:
        sub.chmod(0o755)


def test_gzip_with_bad_crc_says_so(tmp_path):
    data = bytearray(gzip.compress(b'{"traceEvents": []}' * 50))
    data[-8] ^= 0xFF  # the CRC32 in the trailer
    f = tmp_path / "t.json.gz"
    f.write_bytes(bytes(data))
    with pytest.raises(ReadError, match="CRC"):
        _io.read_bytes(f)


@pytest.mark.parametrize(("src", "name"), [("nsys/synthetic.sqlite", "cut.sqlite")])
def test_truncated_sqlite_says_damaged_not_unknown(data_dir, tmp_path, src, name):
    raw = (data_dir / src).read_bytes()
    f = tmp_path / name
    for cut in (100, 1000, len(raw) // 2):
        f.write_bytes(raw[:cut])
        with pytest.raises(ReadError, match="damaged or truncated") as err:
            read_file(f)
        assert type(err.value) is ReadError  # not UnknownFormatError


def test_nvidia_smi_stray_byte_in_a_row_drops_that_value(data_dir, tmp_path):
    lines = (data_dir / "nvml" / "smi_units.csv").read_bytes().split(b"\n")
    good = read_file(data_dir / "nvml" / "smi_units.csv", "nvml")
    i = next(i for i, ln in enumerate(lines[1:], 1) if b" W" in ln)
    lines[i] = lines[i].replace(b" W", b" W\xff", 1)
    f = tmp_path / "smi.csv"
    f.write_bytes(b"\n".join(lines))
    from analysis.errors import RecoveryWarning

    with pytest.warns(RecoveryWarning, match=r"1 power_w value\(s\) with an unreadable unit"):
        df = read_file(f, "nvml")
    assert len(df) == len(good)
    assert df["power_w"].isna().sum() == good["power_w"].isna().sum() + 1
