"""roce for Python: RoCEv2 captures decoded and explained, packets crafted bit-exact, and the
InfiniBand transport as a golden model.

The work is done in Rust (the ``roce._roce`` extension, the same code as the ``roce``
command): ``decode`` yields what ``roce decode --json`` prints, ``analyze`` returns what
``roce analyze --json`` prints, each line as a dict with the same keys and values.

>>> import roce
>>> frame = roce.build("RC_SEND_ONLY", dest_qp=0x11, psn=7, payload=b"hello")
>>> roce.icrc_ok(frame)
True
>>> roce.parse(frame)["bth"]["psn"]
7
"""

from __future__ import annotations

import json as _json
import os as _os
from typing import IO, Any, Dict, Iterator, List, Optional, Tuple, Union

from . import _roce
from ._roce import __version__, build, icrc, icrc_ok, with_icrc

from ._roce import (
    Access,
    CreateError,
    Device,
    DeviceError,
    ModifyError,
    MwError,
    PostError,
)

Source = Union[str, "_os.PathLike[str]", bytes, bytearray, memoryview, IO[bytes]]

__all__ = [
    "__version__",
    "Access",
    "CreateError",
    "Device",
    "DeviceError",
    "ModifyError",
    "MwError",
    "PostError",
    "analyze",
    "build",
    "decode",
    "decode_arrow",
    "decode_table",
    "from_scapy",
    "icrc",
    "icrc_ok",
    "parse",
    "table_schema",
    "to_scapy",
    "with_icrc",
]


def decode(source: Source, *, snaplen: Optional[int] = None) -> Iterator[Dict[str, Any]]:
    """Decode a capture (pcap or pcapng): one dict per record, equal to the line
    ``roce decode --json`` prints for it.

    ``source`` is a path, the capture's bytes, or a file object opened in binary mode.
    With ``snaplen``, every record is cut to that many bytes first, as a headers-only
    capture would have it (the decoder then says which headers were cut).

    The records are decoded in Rust a few thousand at a time while you iterate; a capture
    that ends in a damaged record raises ``ValueError`` after the records before it.
    """
    for batch in _roce.DecodeBatches(source, snaplen):
        yield from batch


def decode_arrow(
    source: Source,
    *,
    snaplen: Optional[int] = None,
    batch_rows: int = 65536,
    fabric_columns: bool = False,
) -> "_roce.ArrowStream":
    """The rows of ``decode_table`` as an Arrow stream, decoded as they are read: an object
    with ``__arrow_c_stream__`` (the Arrow PyCapsule interface) for any tool that takes one,
    without pyarrow: ``polars.DataFrame(roce.decode_arrow(p))``,
    ``duckdb.sql("select ... from s")`` with ``s = roce.decode_arrow(p)``, or
    ``pyarrow.RecordBatchReader.from_stream``. A path or bytes is decoded anew for each
    reader of the stream; a file object can be read once. ``fabric_columns``: MRC's and UET's
    columns too (see ``decode_table``)."""
    return _roce.ArrowStream(source, snaplen, batch_rows, fabric_columns)


def decode_table(
    source: Source,
    *,
    snaplen: Optional[int] = None,
    batch_rows: int = 65536,
    fabric_columns: bool = False,
) -> Any:
    """Decode a capture into a ``pyarrow.Table``: one row per record (the dict ``decode``
    yields for it), one column per key, nested headers flattened with dotted names
    (``bth.psn``, ``reth.rkey``); a key a record does not have is a null. See
    ``table_schema()`` for the columns; three differ from the dicts: ``ts`` is a
    ``timestamp[ns, UTC]``, and ``mad``/``cm``/``smp``/``sa`` and ``mac_control.quanta``
    hold the JSON text of the value.

    The table is built in Rust, ``batch_rows`` rows at a time, and handed to pyarrow
    through the Arrow C data interface (no row passes through Python objects). The same
    columns as ``roce decode --format parquet``. With ``fabric_columns`` (the CLI's
    ``--fabric-columns``) a column per key of the MRC and UET packets' dicts too
    (``uet.pds.psn``, ``mrc.seth.sacked``); without it an MRC or UET packet is a row whose
    ``error`` says what it is. Needs pyarrow."""
    import pyarrow as pa

    stream = decode_arrow(
        source, snaplen=snaplen, batch_rows=batch_rows, fabric_columns=fabric_columns
    )
    return pa.RecordBatchReader.from_stream(stream).read_all()


def table_schema(fabric_columns: bool = False) -> List[Tuple[str, str]]:
    """The columns of ``decode_table`` (and of ``roce decode --format parquet``) in order:
    ``(name, type)`` pairs, the types as Arrow names (``uint32``, ``string``, ...); with
    ``fabric_columns``, MRC's and UET's too."""
    return _roce.table_schema(fabric_columns)


def analyze(
    *sources: Source,
    events: bool = False,
    qp: Optional[int] = None,
    start: Optional[float] = None,
    end: Optional[float] = None,
    stall: float = 0.1,
    cnp_interval: float = 50e-6,
    link_speed: float = 100e9,
    pfc_storm: float = 0.1,
    match_window: float = 0.01,
) -> List[Dict[str, Any]]:
    """Analyze a capture: a list of dicts equal to the lines of ``roce analyze --json``
    (a ``connection`` object per RC connection, with ``events=True`` an ``event`` object
    per event, then PAUSE/PFC and, with several captures, the loss localisation).

    Several captures of the same traffic (paths): the first is analyzed and every pair is
    matched to say between which capture points each loss happened. Times are seconds
    (``start``/``end`` from the first packet, ``stall``, ``cnp_interval``, ``pfc_storm``,
    ``match_window``), ``link_speed`` is bits per second, ``qp`` keeps the connections with
    that QPN on either side.
    """
    if not sources:
        raise TypeError("analyze() needs at least one capture")
    out = _roce.analyze_json(
        list(sources),
        events=events,
        qp=qp,
        start=start,
        end=end,
        stall=stall,
        cnp_interval=cnp_interval,
        link_speed=link_speed,
        pfc_storm=pfc_storm,
        match_window=match_window,
    )
    return out


def parse(frame: bytes, *, link_type: int = 1) -> Dict[str, Any]:
    """One frame (Ethernet unless ``link_type`` says otherwise: 101 raw IP, 113 Linux SLL,
    ...) decoded: the dict ``roce decode --json`` prints for it as frame 1 at time 0. A frame
    that is not RoCE gives its ``not_roce`` reason, a damaged one its ``malformed`` layer and
    reason."""
    return _json.loads(_roce.parse_json(bytes(frame), link_type=link_type))


def to_scapy(frame: bytes) -> Any:
    """The frame as a scapy packet (``Ether``; scapy's own RoCE layers, when its ``contrib``
    module is loaded, dissect BTH and what follows). Needs scapy."""
    try:
        from scapy.layers.l2 import Ether
    except ImportError as e:  # pragma: no cover
        raise ImportError("roce.to_scapy needs scapy: pip install scapy") from e
    return Ether(bytes(frame))


def from_scapy(packet: Any, *, fix_icrc: bool = True) -> bytes:
    """A scapy packet's bytes, with the ICRC recomputed (scapy fills it only when its RoCE
    layer computes it; a packet edited after does not). ``fix_icrc=False`` keeps the bytes
    as they are."""
    raw = bytes(packet)
    return with_icrc(raw) if fix_icrc else raw
