"""Known answers for nvidia-smi ``--query-gpu`` CSV logs (reader ``nvml``)."""

from __future__ import annotations

import datetime as dt
import sqlite3

import numpy as np
import pytest

from analysis import schema
from analysis.errors import ReadError, RecoveryWarning
from analysis.readers import nsys_csv, nvml, nvprof_csv


def _utc_ns(*args: int, us: int = 0) -> int:
    t = dt.datetime(*args, tzinfo=dt.timezone.utc)
    return (int(t.timestamp()) * 1_000_000 + us) * 1000


def test_native_header_with_units(data_dir):
    path = data_dir / "nvml" / "smi_units.csv"
    assert nvml.sniff(path)
    df = nvml.read(path, host="node1")
    schema.validate_samples(df)
    assert df["ts_ns"].tolist() == [_utc_ns(2023, 9, 7, 12, 34, 56, us=789000),
                                    _utc_ns(2023, 9, 7, 12, 34, 56, us=790000),
                                    _utc_ns(2023, 9, 7, 12, 34, 57, us=789000)]
    assert df["device"].tolist() == [0, 1, 0] and set(df["host"]) == {"node1"}
    assert df["util_gpu_pct"].tolist() == [45, 0, 100]
    assert df["util_mem_pct"].tolist() == [12, 0, 50]
    assert df["mem_used_mib"].tolist() == [21760, 3, 21762]
    assert set(df["mem_total_mib"]) == {40960}
    assert df["power_w"].tolist()[0] == 221.76 and np.isnan(df["power_w"].tolist()[1])  # [N/A]
    assert df["temp_c"].tolist() == [61, 35, 62]
    assert df["sm_clock_mhz"].tolist()[:2] == [1410, 210] and np.isnan(df["sm_clock_mhz"].iloc[2])


def test_nounits_and_noheader(data_dir):
    df = nvml.read(data_dir / "nvml" / "smi_nounits.csv")
    assert df["util_gpu_pct"].tolist() == [45, 0] and df["mem_used_mib"].tolist() == [21760, 3]
    path = data_dir / "nvml" / "smi_noheader.csv"
    assert nvml.sniff(path)
    with pytest.raises(ReadError, match=r"no header.*columns=.*utilization\.gpu"):
        nvml.read(path)
    df = nvml.read(path, columns=["timestamp", "index", "utilization.gpu", "memory.used [MiB]",
                                  "power.draw [W]"])
    assert df["util_gpu_pct"].tolist() == [45, 47] and df["power_w"].tolist() == [221.76, 223.0]
    with pytest.raises(ReadError, match="unknown column"):
        nvml.read(path, columns=["timestamp", "index", "gpu.fun", "memory.used", "power.draw"])


def test_script_headers(data_dir):
    df = nvml.read(data_dir / "nvml" / "script_header.csv")
    assert df["ts_ns"].tolist() == [_utc_ns(2025, 9, 24, 3, 41, 43, us=487000)] * 2
    assert df["temp_c"].tolist() == [23, 42] and df["util_gpu_pct"].tolist() == [0, 100]
    assert df["power_w"].tolist() == [73.41, 381.42] and df["device"].tolist() == [0, 1]
    deg = nvml.read(data_dir / "nvml" / "degree_header.csv")  # temperature[°C], name column
    assert deg["temp_c"].tolist() == [48] and deg["mem_total_mib"].tolist() == [24564]
    assert deg["util_gpu_pct"].tolist() == [4] and deg["mem_used_mib"].tolist() == [1747]


def test_registry_read_passes_options(data_dir):
    from analysis.readers import read

    path = data_dir / "nvml" / "smi_noheader.csv"
    df = read(path, columns=["timestamp", "index", "utilization.gpu", "memory.used", "power.draw"],
              host="n1")
    assert df["util_gpu_pct"].tolist() == [45, 47] and set(df["host"]) == {"n1"}
    with pytest.raises(ReadError, match="no header"):
        read(path)


def test_timezone_option(data_dir):
    path = data_dir / "nvml" / "smi_nounits.csv"
    utc = nvml.read(path)["ts_ns"].iloc[0]
    assert nvml.read(path, tz="-04:00")["ts_ns"].iloc[0] - utc == 4 * 3600 * 10**9
    assert nvml.read(path, tz="America/New_York")["ts_ns"].iloc[0] - utc == 4 * 3600 * 10**9  # EDT
    assert nvml.read(path, tz=dt.timezone(dt.timedelta(hours=2)))["ts_ns"].iloc[0] - utc == -2 * 3600 * 10**9
    iso = data_dir / "nvml" / "script_header.csv"  # explicit Z: tz= does not move it
    assert nvml.read(iso, tz="-04:00")["ts_ns"].tolist() == nvml.read(iso)["ts_ns"].tolist()


def test_bad_input(tmp_path, data_dir):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert not nvml.sniff(empty)
    with pytest.raises(ReadError, match="empty"):
        nvml.read(empty)
    text = (data_dir / "nvml" / "smi_units.csv").read_text().splitlines()
    garbage = tmp_path / "garbage.csv"
    garbage.write_text("\n".join([*text, text[0], "2023/09/07 12:35:00.000, 0, half", "nonsense"]) + "\n")
    with pytest.warns(RecoveryWarning, match="dropped 3 garbage row"):
        df = nvml.read(garbage)
    assert len(df) == 3
    no_ts = tmp_path / "nots.csv"
    no_ts.write_text("index, utilization.gpu [%]\n0, 5 %\n")
    with pytest.raises(ReadError, match="no timestamp"):
        nvml.read(no_ts)
    bad_unit = tmp_path / "unit.csv"
    bad_unit.write_text("timestamp, power.draw [W]\n2023/09/07 12:34:56.789, 5 kW\n")
    with pytest.raises(ReadError, match="unknown unit"):
        nvml.read(bad_unit)


def test_sniff_does_not_claim_others(tmp_path, data_dir):
    gpu = tmp_path / "samples-node1.csv"
    gpu.write_text("ts_ns,host,device,util_gpu_pct,util_mem_pct,mem_used_mib,mem_total_mib,"
                   "power_w,temp_c,sm_clock_mhz\n1700000000000000000,node1,0,50,10,100,200,300,60,1400\n")
    cpu = tmp_path / "samples-node2.csv"
    cpu.write_text("ts_ns,host,cpu_core,rank,cpu_util_pct,rss_mib\n1700000000000000000,node2,,,5.0,\n")
    assert not nvml.sniff(gpu) and not nvml.sniff(cpu)
    db = tmp_path / "x.csv"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    assert not nvml.sniff(db)
    for f in (data_dir / "nvml").glob("*.csv"):
        assert nvml.sniff(f) and not nsys_csv.sniff(f) and not nvprof_csv.sniff(f)


# --- corpus -----------------------------------------------------------------------------------
def test_nanogpt_gpu_metrics(corpus_dir):
    path = corpus_dir / "nvml_smi" / "nanogpt-pr643-f4f827d__gpu_metrics.csv"
    assert nvml.sniff(path)
    df = nvml.read(path)
    schema.validate_samples(df)
    n_rows = sum(1 for line in path.read_text().splitlines()[1:] if line.strip())
    assert len(df) == n_rows == 6240
    assert sorted(df["device"].unique()) == list(range(8))
    assert (df.groupby("device")["ts_ns"].size() == 780).all()
    assert df["ts_ns"].iloc[0] == _utc_ns(2025, 9, 24, 3, 41, 43, us=487000)
    assert df[["temp_c", "util_gpu_pct", "power_w"]].notna().all().all()
    assert df["util_gpu_pct"].max() == 100 and df["power_w"].iloc[0] == 73.41


def test_flame_smi_aligns_with_nsys_session(corpus_dir):
    path = corpus_dir / "nvml_smi" / "flame__torch-ex-smi.csv"
    assert nvml.sniff(path)
    df = nvml.read(path, tz="America/New_York")  # nvidia-smi wrote local time (EDT)
    assert len(df) == 65
    assert df["power_w"].iloc[0] == 18.81 and df["power_w"].iloc[-1] == 37.87
    assert df["device"].isna().all()
    db = corpus_dir / "nsys" / "flame__torch-ex.sqlite"
    con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    utc, duration = con.execute(
        "SELECT utcEpochNs, duration FROM TARGET_INFO_SESSION_START_TIME, ANALYSIS_DETAILS").fetchone()
    con.close()
    # the smi log brackets the nsys session once the local time is converted
    assert df["ts_ns"].min() < utc and df["ts_ns"].max() > utc + duration


def test_ddd_gpu_usage_log(corpus_dir):
    path = corpus_dir / "nvml_smi" / "ddd__gpu_usage_log.csv"
    assert nvml.sniff(path)
    df = nvml.read(path)
    assert len(df) == 77
    assert set(df["device"]) == {0} and set(df["mem_total_mib"]) == {24564}
    assert df["temp_c"].between(48, 58).all() and df["util_gpu_pct"].max() == 33
    assert df["ts_ns"].iloc[0] == _utc_ns(2025, 5, 20, 22, 24, 27, us=466000)
