"""roce.decode_table (Arrow, through the C data interface) and `roce decode --format parquet`:
every row holds what roce.decode's dict for that record holds, key for key (nested keys
dotted), and the Parquet file the CLI writes reads back as the same table."""

from __future__ import annotations

import importlib
import json
import os
import subprocess

import pytest

import roce


def need(module):
    """`module`, imported; a failure under CI (which installs it), else a skip naming it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail(f"{module} is not installed (.ci/run installs it)")
        pytest.skip(f"{module} is not installed (pip install {module.split('.')[0]})", allow_module_level=True)


pa = need("pyarrow")
pq = need("pyarrow.parquet")

CAPTURES = [
    "linlinw5-rdma_ib_tutorial/rdma_write_bw.pcap",
    "linlinw5-rdma_ib_tutorial/rdma_cm.pcap",
    "linlinw5-rdma_ib_tutorial/pingpong_ud.pcap",
    "linlinw5-rdma_ib_tutorial/rdma_atomic_bw.pcap",
    "rdma-roce-lab/roce_capture_read-write-ecn.pcap",
]
JSON_TEXT = {"mad", "cm", "smp", "sa", "mac_control.quanta"}


def flatten(d, prefix=""):
    out = {}
    for k, v in d.items():
        key = prefix + k
        if isinstance(v, dict) and key not in JSON_TEXT:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def rows_of(table):
    """The table's rows as flat dicts without nulls; ts as integer nanoseconds; the JSON
    text columns parsed."""
    ts = table.column("ts").cast(pa.int64()).to_pylist()
    rows = []
    for r, t in zip(table.drop_columns(["ts"]).to_pylist(), ts):
        row = {k: (json.loads(v) if k in JSON_TEXT else v) for k, v in r.items() if v is not None}
        row["ts"] = t
        rows.append(row)
    return rows


def expected(dicts):
    out = []
    for d in dicts:
        f = flatten(d)
        # The dict's ts is seconds (a float: not exact to the nanosecond); checked apart.
        f["ts"] = round(f["ts"] * 1e9)
        out.append(f)
    return out


def same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        # A float's seconds carry ~0.2 us of error at today's epoch: ts within 1 us.
        assert abs(g.pop("ts") - w.pop("ts")) < 1000, (g, w)
        assert g == w


@pytest.mark.parametrize("name", CAPTURES)
def test_table_rows_are_the_decode_dicts(captures, name):
    path = captures / name
    table = roce.decode_table(path)
    assert table.num_rows > 0
    assert [f.name for f in table.schema] == [n for n, _ in roce.table_schema()]
    same(rows_of(table), expected(roce.decode(path)))


def test_table_with_a_snap_length_and_small_batches(captures):
    path = captures / CAPTURES[1]
    table = roce.decode_table(path, snaplen=70, batch_rows=7)
    assert table.num_rows == len(list(roce.decode(path)))
    assert table.column("snap_truncated").to_pylist().count(True) > 0
    same(rows_of(table), expected(roce.decode(path, snaplen=70)))


def test_types_are_the_schema(captures):
    table = roce.decode_table(captures / CAPTURES[0])
    types = dict(roce.table_schema())
    assert types["bth.psn"] == "uint32"
    assert table.schema.field("bth.psn").type == pa.uint32()
    assert table.schema.field("ts").type == pa.timestamp("ns", tz="UTC")
    assert table.schema.field("reth.va").type == pa.uint64()
    assert table.schema.field("icrc_ok").type == pa.bool_()
    assert table.schema.field("icrc").type == pa.string()
    assert table.schema.field("src").type == pa.dictionary(pa.int32(), pa.string())
    assert table.schema.field("bth.opcode_name").type == pa.dictionary(pa.int16(), pa.string())
    assert table.schema.field("ecn").type == pa.dictionary(pa.int8(), pa.string())
    for f in table.schema:
        if f.name != "ts":
            assert types[f.name] == str(f.type), f.name


@pytest.mark.parametrize("name", CAPTURES[:2])
def test_dictionary_columns_hold_each_text_once_per_batch(captures, name):
    """A dictionary column's batch holds each distinct text once (pandas' categories must be
    unique), every one of them used, and its rows are the texts of a plain string column."""
    table = roce.decode_table(captures / name, batch_rows=7)
    assert table.column("src").num_chunks > 1
    dictionaries = [f.name for f in table.schema if pa.types.is_dictionary(f.type)]
    assert {"src", "dst", "ecn", "version", "bth.opcode_name"} <= set(dictionaries)
    for n in dictionaries:
        for chunk in table.column(n).chunks:
            texts = chunk.dictionary.to_pylist()
            assert len(set(texts)) == len(texts), (n, texts)
            used = set(chunk.indices.drop_null().to_pylist())
            assert used == set(range(len(texts))), (n, used, texts)
        plain = table.column(n).cast(pa.string())
        assert plain.to_pylist() == table.column(n).to_pylist()


def test_parquet_from_the_cli_is_the_table(roce_cli, captures, tmp_path):
    for name in CAPTURES[:2]:
        out = tmp_path / "t.parquet"
        subprocess.run([roce_cli, "decode", "--format", "parquet", "-o", str(out), str(captures / name)], check=True, capture_output=True)
        from_file = pq.read_table(out)
        table = roce.decode_table(captures / name)
        # Parquet holds the dictionary columns as strings (dictionary-encoded in its pages).
        plain = pa.schema([f.with_type(pa.string()) if pa.types.is_dictionary(f.type) else f for f in table.schema])
        assert from_file.schema.equals(plain)
        assert from_file.equals(table.cast(plain))


def test_a_stream_reads_again_from_a_path_once_from_a_file_and_a_damaged_capture_raises(captures):
    s = roce.decode_arrow(captures / CAPTURES[0])
    t = pa.RecordBatchReader.from_stream(s).read_all()
    assert t.num_rows > 0
    # A path (or bytes) is decoded anew for every stream: DuckDB asks twice.
    assert pa.RecordBatchReader.from_stream(s).read_all().equals(t)
    assert pa.schema(s).equals(t.schema)
    with open(captures / CAPTURES[0], "rb") as f:
        once = roce.decode_arrow(f)
        assert pa.RecordBatchReader.from_stream(once).read_all().equals(t)
        with pytest.raises(RuntimeError, match="read already"):
            pa.RecordBatchReader.from_stream(once)
    data = (captures / CAPTURES[0]).read_bytes()
    reader = pa.RecordBatchReader.from_stream(roce.decode_arrow(data[:-10], batch_rows=1 << 20))
    # The rows before the damaged (last) record come in a batch of their own, then the error.
    first = reader.read_next_batch()
    assert first.num_rows >= t.num_rows - 1
    assert first.equals(t.slice(0, first.num_rows).combine_chunks().to_batches()[0])
    with pytest.raises(Exception, match="truncated"):
        reader.read_next_batch()
    with pytest.raises(ValueError):
        roce.decode_arrow(b"not a capture")
    with pytest.raises(OSError):
        roce.decode_arrow("/nonexistent/capture.pcap")


def test_duckdb_reads_a_stream(captures):
    duckdb = need("duckdb")
    s = roce.decode_arrow(captures / CAPTURES[1])
    got = duckdb.sql('SELECT "bth.dest_qp" AS qp, count(*) AS n FROM s GROUP BY 1 ORDER BY 1').fetchall()
    want = {}
    for d in roce.decode(captures / CAPTURES[1]):
        qp = d.get("bth", {}).get("dest_qp")
        want[qp] = want.get(qp, 0) + 1
    assert got == sorted(want.items(), key=lambda kv: (kv[0] is None, kv[0]))


def test_the_readme_duckdb_queries(roce_cli, tmp_path):
    """The README's queries over a directory of Parquet files (decode) and of JSON lines
    (analyze): packets seen twice per QP, and the analysis' retransmitted packets, which
    also count the resends of packets lost before the capture point."""
    duckdb = need("duckdb")
    for i, (qps, loss) in enumerate([(8, 50), (4, 100)]):
        cap = tmp_path / f"c{i}.pcap"
        subprocess.run([roce_cli, "gen-capture", "--rc", str(qps), "--loss-every", str(loss), "--packets", "20000", str(cap)], check=True, capture_output=True)
        subprocess.run([roce_cli, "decode", "--format", "parquet", "-o", str(tmp_path / f"c{i}.parquet"), str(cap)], check=True, capture_output=True)
        with open(tmp_path / f"c{i}.jsonl", "wb") as f:
            subprocess.run([roce_cli, "analyze", "--json", str(cap)], check=True, stdout=f)
    seen_twice = duckdb.sql(f"""
        SELECT regexp_extract(filename, '[^/]*$') AS capture, src, dst, "bth.dest_qp" AS qp,
               count(*) - count(DISTINCT "bth.psn") AS resent
        FROM read_parquet('{tmp_path}/*.parquet', filename = true)
        WHERE "bth.opcode_name" LIKE 'RC%'
          AND "bth.opcode_name" NOT LIKE '%ACKNOWLEDGE%'
          AND "bth.opcode_name" NOT LIKE '%READ_RESPONSE%'
        GROUP BY ALL ORDER BY capture, qp""").fetchall()
    analysis = duckdb.sql(f"""
        SELECT regexp_extract(filename, '[^/]*$') AS capture, s.addr, s.qpn, s.retransmitted_packets
        FROM (SELECT filename, unnest(sides) AS s
              FROM read_json('{tmp_path}/*.jsonl', filename = true, union_by_name = true)
              WHERE type = 'connection')
        WHERE s.retransmitted_packets IS NOT NULL AND s.packets > 0 AND s.messages.write.count > 0
        ORDER BY capture, s.qpn""").fetchall()
    assert len(seen_twice) == 12 and len(analysis) == 12, (seen_twice, analysis)
    for (cap, _, _, _, resent), (_, _, _, retransmitted) in zip(seen_twice, analysis):
        # Every resend whose first copy reached the capture point is seen twice; the
        # analysis adds the resends of packets lost upstream.
        assert 0 < resent < retransmitted, (cap, resent, retransmitted)
