"""Type stubs of the ``roce._roce`` extension (Rust). Use the ``roce`` package."""

from typing import (
    Any,
    ClassVar,
    Dict,
    Iterator,
    List,
    Literal,
    Optional,
    Sequence,
    Tuple,
    TypedDict,
    Union,
)

__version__: str

class DecodeBatches:
    """The records of a capture as the dicts of ``roce decode --json``'s lines, a batch at a
    time. ``templates``: the row shapes whose empty dicts are kept and copied (past them,
    rows are made key by key; 0 makes every row so)."""

    def __init__(
        self, source: Any, snaplen: Optional[int] = None, templates: int = 512
    ) -> None: ...
    def __iter__(self) -> "DecodeBatches": ...
    def __next__(self) -> List[Dict[str, Any]]: ...
    def stats(self) -> str: ...

class ArrowStream:
    """A capture's rows as an Arrow C stream (the Arrow PyCapsule interface): a path or bytes
    is decoded anew for every stream, a file object once."""

    def __init__(
        self,
        source: Any,
        snaplen: Optional[int] = None,
        batch_rows: int = 65536,
        fabric_columns: bool = False,
    ) -> None: ...
    def __arrow_c_stream__(self, requested_schema: Optional[Any] = None) -> Any: ...
    def __arrow_c_schema__(self) -> Any: ...

def table_schema(fabric_columns: bool = False) -> List[Tuple[str, str]]: ...
def analyze_json(
    sources: List[Any],
    *,
    events: bool = False,
    qp: Optional[int] = None,
    start: Optional[float] = None,
    end: Optional[float] = None,
    stall: float = 0.1,
    cnp_interval: float = 50e-6,
    link_speed: float = 100e9,
    pfc_storm: float = 0.1,
    match_window: float = 0.01,
) -> bytes: ...
def build(
    opcode: Union[str, int],
    *,
    dest_qp: int = 0,
    psn: int = 0,
    payload: Optional[bytes] = None,
    ack_req: bool = False,
    solicited: bool = False,
    migreq: bool = False,
    pkey: int = 0xFFFF,
    fecn: bool = False,
    becn: Optional[bool] = None,
    tver: int = 0,
    pad_count: Optional[int] = None,
    reth: Optional[Dict[str, int]] = None,
    aeth: Optional[Dict[str, int]] = None,
    atomic_eth: Optional[Dict[str, int]] = None,
    atomic_ack_eth: Optional[Dict[str, int]] = None,
    deth: Optional[Dict[str, int]] = None,
    immdt: Optional[int] = None,
    ieth: Optional[int] = None,
    rdeth: Optional[int] = None,
    xrceth: Optional[int] = None,
    feth: Optional[int] = None,
    src: str = "192.168.10.1",
    dst: str = "192.168.10.2",
    udp_sport: int = 0xC000,
    udp_dport: int = 4791,
    src_mac: Union[str, bytes, None] = None,
    dst_mac: Union[str, bytes, None] = None,
    vlan: Optional[int] = None,
    pcp: int = 0,
    dscp: int = 0,
    ecn: Union[int, str, None] = None,
    ttl: int = 64,
    udp_checksum: bool = False,
) -> bytes: ...
def parse_json(frame: bytes, *, link_type: int = 1) -> bytes: ...
def icrc(frame: bytes, *, link_type: int = 1) -> int: ...
def icrc_ok(frame: bytes, *, link_type: int = 1) -> bool: ...
def with_icrc(frame: bytes, *, link_type: int = 1) -> bytes: ...
def _json_loads(text: bytes) -> Any:
    """The JSON reader behind decode and analyze (for the test suite)."""
    ...

# --- the sans-IO transport (python/src/device.rs) ---


# An IP address: a str ("10.0.0.1", "fe80::1") or anything whose str() is one (ipaddress objects).
_Ip = Any
# A scatter/gather entry: (mr, offset, length) of a region of this device, or a raw Sge
# {"addr": int, "length": int, "lkey": int}.
_Sge = Union[Tuple[int, int, int], Dict[str, int]]

_QpState = Literal["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"]
_Service = Literal["RC", "UC", "UD"]
_WcStatus = Literal[
    "Success",
    "LocLenErr",
    "LocQpOpErr",
    "LocEecOpErr",
    "LocProtErr",
    "WrFlushErr",
    "MwBindErr",
    "BadRespErr",
    "LocAccessErr",
    "RemInvReqErr",
    "RemAccessErr",
    "RemOpErr",
    "RetryExcErr",
    "RnrRetryExcErr",
    "LocRddViolErr",
    "RemInvRdReqErr",
    "RemAbortErr",
    "InvEecnErr",
    "InvEecStateErr",
    "FatalErr",
    "RespTimeoutErr",
    "GeneralErr",
]
_WcOpcode = Literal[
    "Send",
    "RdmaWrite",
    "RdmaRead",
    "CompSwap",
    "FetchAdd",
    "Flush",
    "AtomicWrite",
    "Recv",
    "RecvRdmaWithImm",
]

class DeviceError(Exception):
    """An error of the sans-IO transport; ``kind`` is the Rust error's variant name
    (``UnknownHandle`` for a handle this device did not give), the message starts with it."""

    kind: str

class PostError(DeviceError):
    """A post was refused (roce_stack::PostError): NoSuchQp, WrongState, QueueFull,
    Unsupported, HasSrq, NoSuchSrq, InvalidSge, TooLong, InvalidAtomic."""

class ModifyError(DeviceError):
    """A QP state transition was refused (roce_stack::ModifyError): NoSuchQp,
    IllegalTransition, MissingAttribute, InvalidValue."""

class CreateError(DeviceError):
    """A QP or SRQ could not be created (roce_stack::CreateError): NoSuchPd, NoSuchCq,
    TooManyQps."""

class MwError(DeviceError):
    """A memory window could not be bound or invalidated (roce_stack::MwError): NoSuchWindow,
    WrongPd, NotBindable, Rights, Range, State."""

class Access:
    """Access rights (``ibv_access_flags`` values): int bit flags, combined with ``|``."""

    NONE: ClassVar[int]  # 0
    LOCAL_WRITE: ClassVar[int]  # 1
    REMOTE_WRITE: ClassVar[int]  # 2
    REMOTE_READ: ClassVar[int]  # 4
    REMOTE_ATOMIC: ClassVar[int]  # 8
    ALL: ClassVar[int]  # 15
    MW_BIND: ClassVar[int]  # 16

class _PathDict(TypedDict, total=False):
    """The fields of roce_stack::PathConfig (those left out keep their defaults)."""

    local: str  # default "127.0.0.1"
    remote: str  # default "127.0.0.1"
    src_port: int  # default 0xC000
    remote_src_port: int  # default 0xC000
    local_port: int  # default 4791
    remote_port: int  # default 4791
    ecn: int  # default 2 (ECT(0))
    verify_icrc: bool  # default True

class _Transmit(TypedDict):
    """A datagram ``Device.poll_transmit`` gives: the UDP payload and where it goes."""

    payload: bytes
    src: Tuple[str, int]
    dst: Tuple[str, int]
    ecn: int
    qpn: int

class _DeliveryDict(TypedDict):
    """What ``Device.handle_datagram`` did with a datagram."""

    delivery: Literal["Connected", "OutOfSequence", "Datagram", "Management", "Dropped"]
    qpn: Optional[int]
    refusal: Optional[Literal["Malformed", "UnknownQp", "Qp", "Ud", "Management"]]
    reason: Optional[str]
    accepted: bool

class _CompletionDict(TypedDict):
    """A work completion (roce_stack::Completion)."""

    wr_id: int
    status: _WcStatus
    status_code: int
    opcode: _WcOpcode
    opcode_code: int
    byte_len: int
    imm: Optional[int]
    invalidated_rkey: Optional[int]
    qp: int
    src_qp: Optional[int]
    src: Optional[Tuple[str, int]]

class _MrInfo(TypedDict):
    lkey: int
    rkey: int
    va: int
    length: int
    access: int
    pd: Optional[int]
    rkey_valid: bool

class _QpInfo(TypedDict):
    qpn: int
    service: _Service
    state: _QpState
    mtu: int
    dest_qpn: int
    next_send_psn: int
    expected_psn: int
    send_queue_len: int
    recv_queue_len: int
    path: _PathDict
    repaths: int

class _AsyncEventDict(TypedDict):
    event: Literal["SrqLimitReached"]
    srq: Optional[int]

class Device:
    """A RoCEv2 endpoint: the sans-IO InfiniBand transport of roce-stack (RC, UC and UD queue
    pairs, shared receive queues, memory windows), driven by the caller with bytes and time
    (integers in nanoseconds). PDs, MRs, CQs and SRQs are int ids; QPs are their QPNs."""

    UD_GRH_LEN: ClassVar[int]  # 40
    path_mtus: ClassVar[Tuple[int, int, int, int, int]]  # (256, 512, 1024, 2048, 4096)

    def __init__(
        self, *, qpn_base: int = 0x11, max_qps: int = 65536, tx_quantum: int = 16, key_seed: int = 0
    ) -> None: ...
    @staticmethod
    def udp_sport(lqpn: int, rqpn: int) -> int: ...

    # Verbs objects.
    def alloc_pd(self) -> int: ...
    def reg_mr(self, pd: int, data: Union[int, bytes, bytearray, memoryview], access: int) -> int: ...
    def dereg_mr(self, mr: int) -> bool: ...
    def mr_info(self, mr: int) -> _MrInfo: ...
    def mr_remote_addr(self, mr: int, offset: int = 0) -> Tuple[int, int]: ...
    def mr_read(self, mr: int, offset: int = 0, length: Optional[int] = None) -> bytes: ...
    def mr_write(self, mr: int, offset: int, data: Union[bytes, bytearray, memoryview]) -> None: ...
    def mr_dirty_ranges(self, mr: int) -> List[Tuple[int, int]]: ...
    def mr_clear_dirty(self, mr: int) -> None: ...
    def revalidate_rkey(self, mr: int) -> bool: ...
    def create_cq(self) -> int: ...
    def create_qp(
        self,
        pd: int,
        send_cq: int,
        recv_cq: int,
        *,
        srq: Optional[int] = None,
        max_send_wr: int = 1024,
        max_recv_wr: int = 1024,
        max_msg_size: int = 1073741824,
        max_unacked_psns: int = 128,
        ack_req_every: int = 64,
        cnp_interval_ns: Optional[int] = 50000,
        infinite_retry_at_7: bool = False,
    ) -> int: ...
    def create_uc_qp(
        self,
        pd: int,
        send_cq: int,
        recv_cq: int,
        *,
        max_send_wr: int = 1024,
        max_recv_wr: int = 1024,
        max_msg_size: int = 1073741824,
        max_unacked_psns: int = 128,
        ack_req_every: int = 64,
        cnp_interval_ns: Optional[int] = 50000,
        infinite_retry_at_7: bool = False,
    ) -> int: ...
    def create_ud_qp(self, pd: int, send_cq: int, recv_cq: int, qkey: int, mtu: int, max_wr: int) -> int: ...
    def create_srq(self, pd: int, max_wr: int) -> int: ...
    def post_srq_recv(self, srq: int, wr_id: int, sgl: Sequence[_Sge]) -> None: ...
    def arm_srq_limit(self, srq: int, limit: int) -> bool: ...
    def srq_len(self, srq: int) -> int: ...
    def poll_async_event(self) -> Optional[_AsyncEventDict]: ...
    def alloc_mw(self, pd: int, mw_type: Literal[1, 2] = 1) -> Optional[int]: ...
    def bind_mw(self, rkey: int, mr: int, va: int, length: int, access: int) -> int: ...
    def bind_mw_qp(
        self, qpn: int, rkey: int, mr: int, va: int, length: int, access: int, key_byte: int
    ) -> int: ...
    def invalidate_mw(self, pd: int, rkey: int) -> None: ...

    # QP state.
    def modify_qp(
        self,
        qpn: int,
        state: Union[_QpState, str],
        *,
        access_flags: Optional[int] = None,
        path_mtu: Optional[int] = None,
        dest_qpn: Optional[int] = None,
        rq_psn: Optional[int] = None,
        sq_psn: Optional[int] = None,
        timeout: Optional[int] = None,
        retry_cnt: Optional[int] = None,
        rnr_retry: Optional[int] = None,
        min_rnr_timer: Optional[int] = None,
        max_rd_atomic: Optional[int] = None,
        max_dest_rd_atomic: Optional[int] = None,
        path: Optional[_PathDict] = None,
    ) -> None: ...
    def connect_qp(
        self,
        qpn: int,
        *,
        dest_qpn: int,
        rq_psn: int,
        sq_psn: int,
        path: Optional[_PathDict] = None,
        mtu: int = 1024,
        access: int = 14,
        timeout: int = 14,
        retry_cnt: int = 7,
        rnr_retry: int = 7,
        min_rnr_timer: int = 1,
        max_rd_atomic: int = 16,
        max_dest_rd_atomic: int = 16,
    ) -> None: ...

    # Work requests and completions.
    def post_send(
        self,
        qpn: int,
        wr_id: int,
        opcode: str,
        sgl: Optional[Sequence[_Sge]] = None,
        *,
        remote_va: Optional[int] = None,
        rkey: Optional[int] = None,
        imm: Optional[int] = None,
        invalidate_rkey: Optional[int] = None,
        compare: Optional[int] = None,
        swap: Optional[int] = None,
        add: Optional[int] = None,
        data: Optional[bytes] = None,
        length: Optional[int] = None,
        whole_region: bool = False,
        signaled: bool = True,
        solicited: bool = False,
        fence: bool = False,
    ) -> None: ...
    def post_recv(self, qpn: int, wr_id: int, sgl: Sequence[_Sge]) -> None: ...
    def post_ud_send(
        self,
        qpn: int,
        wr_id: int,
        sgl: Sequence[_Sge],
        *,
        local: _Ip,
        remote: _Ip,
        dest_qpn: int,
        qkey: int,
        remote_port: int = 4791,
        imm: Optional[int] = None,
        signaled: bool = True,
    ) -> None: ...
    def poll_cq(self, cq: int, max: Optional[int] = None) -> List[_CompletionDict]: ...
    def cq_len(self, cq: int) -> int: ...

    # The sans-IO surface.
    def handle_datagram(
        self,
        now_ns: int,
        payload: bytes,
        src: Tuple[_Ip, int],
        dst: Optional[_Ip] = None,
        ecn: int = 0,
        ipv4: Optional[Tuple[int, bool]] = None,
    ) -> _DeliveryDict: ...
    def handle_timeout(self, now_ns: int) -> None: ...
    def poll_timeout(self) -> Optional[int]: ...
    def poll_transmit(self, now_ns: int) -> Optional[_Transmit]: ...

    # Introspection.
    def qp_state(self, qpn: int) -> Optional[_QpState]: ...
    def service(self, qpn: int) -> Optional[_Service]: ...
    def qp_info(self, qpn: int) -> Optional[_QpInfo]: ...
    def qp_stats(self, qpn: int) -> Optional[Dict[str, Any]]: ...
    def ud_stats(self, qpn: int) -> Optional[Dict[str, int]]: ...
    # QP1, the general services interface (MADs).
    def gsi_send(self, local: str, remote: str, mad: bytes, *, remote_port: int = 4791) -> bool: ...
    def gsi_take(self) -> Optional[Dict[str, Any]]: ...
    def gsi_stats(self) -> Dict[str, int]: ...
    def stats(self) -> Dict[str, Any]: ...
    def accepted_datagrams(self) -> int: ...
    def accepted_connected_datagrams(self) -> int: ...
    def repath_qp(self, qpn: int, port: int) -> bool: ...
    def qp_cqs(self, qpn: int) -> Optional[Tuple[Optional[int], Optional[int]]]: ...
