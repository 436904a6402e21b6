//! Communication-management messages (IBTA Vol 1 ch. 12, §12.6): the MADs of class 0x07 that
//! set RC, UC and RD connections up and tear them down (REQ, MRA, REJ, REP, RTU, DREQ, DREP),
//! resolve UD service IDs (SIDR_REQ, SIDR_REP) and load alternate paths (LAP, APR).
//!
//! Each message is an owned `Copy` type with every field of its IBTA table, read from and
//! written to the 232 bytes after the MAD common header ([`crate::mad::DATA_LEN`]); bit fields
//! are numbered as the IBTA does (bit 0 the most significant of its byte; Linux's
//! `ibta_vol1_c12.h` `IBA_FIELD*_LOC` use the same offsets). Bit fields are plain numbers;
//! [`path_mtu_bytes`], [`timeout_ns`], [`rej_reason_name`] and friends give their meaning.
//! [`Message`] parses whichever one an attribute ID names; `visit` lists every field by its
//! IBTA name, for printers.
//!
//! RDMA-CM (Annex A11) conventions are in [`crate::rdma_cm`].
use crate::mad::DATA_LEN;
use crate::wire::{get_bits, set_bits};
use crate::{Layer, Result};

mod codes;
mod message;
pub use codes::*;
pub use message::{Message, MessageKind, MessageView};

/// A field's value, for printers ([`Req::visit`] and friends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// A number of `bits` bits.
    Uint {
        /// The value.
        value: u64,
        /// Its width.
        bits: u32,
    },
    /// A GID (an IPv6 address; RoCE carries IPv4 as `::ffff:a.b.c.d`).
    Gid(&'a [u8; 16]),
    /// Opaque bytes (private data, additional information).
    Bytes(&'a [u8]),
    /// A path (REQ primary and alternate, LAP alternate).
    Path(&'a CmPath),
}

/// The path fields of a REQ (primary and alternate) and of a LAP (§12.6.5, Table 106).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CmPath {
    /// Local port LID (0xffff on RoCE: permissive).
    pub local_port_lid: u16,
    /// Remote port LID.
    pub remote_port_lid: u16,
    /// Local port GID.
    pub local_port_gid: [u8; 16],
    /// Remote port GID.
    pub remote_port_gid: [u8; 16],
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Packet rate (6 bits; [`rate_name`]).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Subnet local (1 bit).
    pub subnet_local: u8,
    /// Local ACK timeout (5 bits; [`timeout_ns`]).
    pub local_ack_timeout: u8,
}

/// Where the fields of a [`CmPath`] are: REQ paths have them in one order, LAP's alternate path
/// in another (its traffic class shares the flow label's word).
#[derive(Debug, Clone, Copy)]
struct PathLayout {
    lids: usize,
    gids: usize,
    flow_label: usize,
    rate: usize,
    traffic_class: usize,
    hop_limit: usize,
    sl: usize,
    ack_timeout: usize,
}

impl PathLayout {
    /// A REQ path at `base` (52 primary, 96 alternate).
    const fn req(base: usize) -> Self {
        Self {
            lids: base,
            gids: base + 4,
            flow_label: base + 36,
            rate: base + 39,
            traffic_class: base + 40,
            hop_limit: base + 41,
            sl: base + 42,
            ack_timeout: base + 43,
        }
    }
    /// The LAP's alternate path.
    const LAP: Self = Self {
        lids: 20,
        gids: 24,
        flow_label: 56,
        rate: 61,
        traffic_class: 59,
        hop_limit: 60,
        sl: 62,
        ack_timeout: 63,
    };
}

impl CmPath {
    fn parse(d: &[u8], l: PathLayout) -> Self {
        let gid = |at: usize| {
            let mut g = [0u8; 16];
            g.copy_from_slice(&d[at..at + 16]);
            g
        };
        Self {
            local_port_lid: get_bits(d, l.lids, 0, 16) as u16,
            remote_port_lid: get_bits(d, l.lids + 2, 0, 16) as u16,
            local_port_gid: gid(l.gids),
            remote_port_gid: gid(l.gids + 16),
            flow_label: get_bits(d, l.flow_label, 0, 20) as u32,
            packet_rate: get_bits(d, l.rate, 2, 6) as u8,
            traffic_class: d[l.traffic_class],
            hop_limit: d[l.hop_limit],
            sl: get_bits(d, l.sl, 0, 4) as u8,
            subnet_local: get_bits(d, l.sl, 4, 1) as u8,
            local_ack_timeout: get_bits(d, l.ack_timeout, 0, 5) as u8,
        }
    }

    fn emit(&self, d: &mut [u8], l: PathLayout) {
        set_bits(d, l.lids, 0, 16, self.local_port_lid.into());
        set_bits(d, l.lids + 2, 0, 16, self.remote_port_lid.into());
        d[l.gids..l.gids + 16].copy_from_slice(&self.local_port_gid);
        d[l.gids + 16..l.gids + 32].copy_from_slice(&self.remote_port_gid);
        set_bits(d, l.flow_label, 0, 20, self.flow_label.into());
        set_bits(d, l.rate, 2, 6, self.packet_rate.into());
        d[l.traffic_class] = self.traffic_class;
        d[l.hop_limit] = self.hop_limit;
        set_bits(d, l.sl, 0, 4, self.sl.into());
        set_bits(d, l.sl, 4, 1, self.subnet_local.into());
        set_bits(d, l.ack_timeout, 0, 5, self.local_ack_timeout.into());
    }

    /// Every field, by its IBTA name (without the `primary_`/`alternate_` prefix).
    pub fn visit(&self, v: &mut dyn FnMut(&'static str, Value<'_>)) {
        let u = |value: u64, bits: u32| Value::Uint { value, bits };
        v("local_port_lid", u(self.local_port_lid.into(), 16));
        v("remote_port_lid", u(self.remote_port_lid.into(), 16));
        v("local_port_gid", Value::Gid(&self.local_port_gid));
        v("remote_port_gid", Value::Gid(&self.remote_port_gid));
        v("flow_label", u(self.flow_label.into(), 20));
        v("packet_rate", u(self.packet_rate.into(), 6));
        v("traffic_class", u(self.traffic_class.into(), 8));
        v("hop_limit", u(self.hop_limit.into(), 8));
        v("sl", u(self.sl.into(), 4));
        v("subnet_local", u(self.subnet_local.into(), 1));
        v("local_ack_timeout", u(self.local_ack_timeout.into(), 5));
    }
}

/// The GID at `at` of a message's bytes.
fn gid_at(d: &[u8; DATA_LEN], at: usize) -> &[u8; 16] {
    const NONE: &[u8; 16] = &[0; 16];
    d.get(at..).and_then(<[u8]>::first_chunk).unwrap_or(NONE)
}

/// Defines one CM message: its struct with every field, and `parse`, `emit`, `visit`.
/// Field kinds: `bits(byte, bit, width)`, `bytes(byte, len)`, `gid(byte)`, `req_path(base)`,
/// `lap_path()`.
macro_rules! cm_message {
    (
        $(#[$doc:meta])*
        $name:ident, $view:ident = $attr:literal;
        $( $(#[$fdoc:meta])* $field:ident : $ty:ty = $kind:ident $args:tt; )*
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$fdoc])* pub $field: $ty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $( $field: cm_message!(@default $kind $args), )* }
            }
        }

        impl $name {
            /// Its attribute ID.
            pub const ATTRIBUTE_ID: u16 = $attr;

            /// Reads it from the 232 bytes after the MAD common header.
            pub fn parse(data: &[u8]) -> Result<Self> {
                Ok($view::new(data)?.to_repr())
            }

            /// Writes every field into the 232 bytes after the MAD common header (bytes no
            /// field covers are left as they are: zero them first for reserved bits of 0).
            ///
            /// # Panics
            /// If `data` is shorter than 232 bytes.
            pub fn emit(&self, data: &mut [u8]) {
                let data = &mut data[..DATA_LEN];
                $( cm_message!(@put data, self.$field, $kind $args); )*
            }

            /// Every field, in wire order, by its IBTA name.
            pub fn visit(&self, v: &mut dyn FnMut(&'static str, Value<'_>)) {
                $( v(stringify!($field), cm_message!(@value self.$field, $kind $args)); )*
            }
        }

        #[doc = concat!("A zero-copy view of a [`", stringify!($name), "`]: each field read ",
            "from the message's bytes when asked for, nothing copied (private data is a slice).")]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $view<'a>(&'a [u8; DATA_LEN]);

        impl<'a> $view<'a> {
            /// A view of the 232 bytes after the MAD common header (longer input is cut).
            pub fn new(data: &'a [u8]) -> Result<Self> {
                match data.first_chunk() {
                    Some(d) => Ok(Self(d)),
                    None => Err(crate::Error::Truncated {
                        layer: Layer::Cm,
                        needed: DATA_LEN,
                        got: data.len(),
                    }),
                }
            }

            /// The bytes it reads.
            pub const fn bytes(&self) -> &'a [u8; DATA_LEN] {
                self.0
            }

            /// Every field copied into the owned message.
            pub fn to_repr(&self) -> $name {
                let data = self.0;
                $name { $( $field: cm_message!(@get data, $kind $args, $ty), )* }
            }

            $(
                $(#[$fdoc])*
                pub fn $field(&self) -> cm_message!(@view_ty $kind, $ty) {
                    cm_message!(@view self.0, $kind $args, $ty)
                }
            )*

            #[doc = concat!("Every field, in wire order, by its IBTA name (as [`",
                stringify!($name), "::visit`]).")]
            pub fn visit(&self, v: &mut dyn FnMut(&'static str, Value<'_>)) {
                $( v(stringify!($field), cm_message!(@view_value self.$field(), $kind $args)); )*
            }
        }
    };
    (@view_ty bits, $ty:ty) => { $ty };
    (@view_ty bytes, $ty:ty) => { &'a [u8] };
    (@view_ty gid, $ty:ty) => { &'a [u8; 16] };
    (@view_ty req_path, $ty:ty) => { CmPath };
    (@view_ty lap_path, $ty:ty) => { CmPath };
    (@view $d:expr, bits ($byte:expr, $bit:expr, $w:expr), $ty:ty) => {
        get_bits($d, $byte, $bit, $w) as $ty
    };
    (@view $d:expr, bytes ($byte:expr, $len:expr), $ty:ty) => { &$d[$byte..$byte + $len] };
    (@view $d:expr, gid ($byte:expr), $ty:ty) => { gid_at($d, $byte) };
    (@view $d:expr, req_path ($base:expr), $ty:ty) => { CmPath::parse($d, PathLayout::req($base)) };
    (@view $d:expr, lap_path (), $ty:ty) => { CmPath::parse($d, PathLayout::LAP) };
    (@view_value $v:expr, bits ($byte:expr, $bit:expr, $w:expr)) => {
        Value::Uint { value: u64::from($v), bits: $w }
    };
    (@view_value $v:expr, bytes $a:tt) => { Value::Bytes($v) };
    (@view_value $v:expr, gid $a:tt) => { Value::Gid($v) };
    (@view_value $v:expr, req_path $a:tt) => { Value::Path(&$v) };
    (@view_value $v:expr, lap_path $a:tt) => { Value::Path(&$v) };
    (@default bits $a:tt) => { 0 };
    (@default bytes ($byte:expr, $len:expr)) => { [0u8; $len] };
    (@default gid $a:tt) => { [0u8; 16] };
    (@default req_path $a:tt) => { CmPath::default() };
    (@default lap_path $a:tt) => { CmPath::default() };
    (@get $d:ident, bits ($byte:expr, $bit:expr, $w:expr), $ty:ty) => {
        get_bits($d, $byte, $bit, $w) as $ty
    };
    (@get $d:ident, bytes ($byte:expr, $len:expr), $ty:ty) => {{
        let mut a = [0u8; $len];
        a.copy_from_slice(&$d[$byte..$byte + $len]);
        a
    }};
    (@get $d:ident, gid ($byte:expr), $ty:ty) => {{
        let mut a = [0u8; 16];
        a.copy_from_slice(&$d[$byte..$byte + 16]);
        a
    }};
    (@get $d:ident, req_path ($base:expr), $ty:ty) => { CmPath::parse($d, PathLayout::req($base)) };
    (@get $d:ident, lap_path (), $ty:ty) => { CmPath::parse($d, PathLayout::LAP) };
    (@put $d:ident, $v:expr, bits ($byte:expr, $bit:expr, $w:expr)) => {
        set_bits($d, $byte, $bit, $w, u64::from($v))
    };
    (@put $d:ident, $v:expr, bytes ($byte:expr, $len:expr)) => {
        $d[$byte..$byte + $len].copy_from_slice(&$v)
    };
    (@put $d:ident, $v:expr, gid ($byte:expr)) => { $d[$byte..$byte + 16].copy_from_slice(&$v) };
    (@put $d:ident, $v:expr, req_path ($base:expr)) => { $v.emit($d, PathLayout::req($base)) };
    (@put $d:ident, $v:expr, lap_path ()) => { $v.emit($d, PathLayout::LAP) };
    (@value $v:expr, bits ($byte:expr, $bit:expr, $w:expr)) => {
        Value::Uint { value: u64::from($v), bits: $w }
    };
    (@value $v:expr, bytes $a:tt) => { Value::Bytes(&$v) };
    (@value $v:expr, gid $a:tt) => { Value::Gid(&$v) };
    (@value $v:expr, req_path $a:tt) => { Value::Path(&$v) };
    (@value $v:expr, lap_path $a:tt) => { Value::Path(&$v) };
}

cm_message! {
    /// ConnectRequest (§12.6.5, Table 106).
    Req, ReqView = 0x0010;
    /// Local communication ID.
    local_comm_id: u32 = bits(0, 0, 32);
    /// Vendor ID (24 bits; Enhanced Connection Establishment).
    vendor_id: u32 = bits(5, 0, 24);
    /// Service ID.
    service_id: u64 = bits(8, 0, 64);
    /// Local CA GUID.
    local_ca_guid: u64 = bits(16, 0, 64);
    /// Local Q_Key (RD and UD).
    local_q_key: u32 = bits(28, 0, 32);
    /// Local QPN (24 bits).
    local_qpn: u32 = bits(32, 0, 24);
    /// Responder resources: the RDMA READ / atomic depth the sender accepts.
    responder_resources: u8 = bits(35, 0, 8);
    /// Local EECN (24 bits; RD).
    local_eecn: u32 = bits(36, 0, 24);
    /// Initiator depth: READ / atomic requests the sender keeps outstanding.
    initiator_depth: u8 = bits(39, 0, 8);
    /// Remote EECN (24 bits; RD).
    remote_eecn: u32 = bits(40, 0, 24);
    /// Remote CM response timeout (5 bits; [`timeout_ns`]).
    remote_cm_response_timeout: u8 = bits(43, 0, 5);
    /// Transport service type (2 bits; [`transport_service_name`]).
    transport_service_type: u8 = bits(43, 5, 2);
    /// End-to-end flow control (1 bit).
    end_to_end_flow_control: u8 = bits(43, 7, 1);
    /// Starting PSN (24 bits).
    starting_psn: u32 = bits(44, 0, 24);
    /// Local CM response timeout (5 bits).
    local_cm_response_timeout: u8 = bits(47, 0, 5);
    /// Retry count (3 bits).
    retry_count: u8 = bits(47, 5, 3);
    /// Partition key.
    partition_key: u16 = bits(48, 0, 16);
    /// Path packet payload MTU (4 bits; [`path_mtu_bytes`]).
    path_packet_payload_mtu: u8 = bits(50, 0, 4);
    /// RDC exists (1 bit).
    rdc_exists: u8 = bits(50, 4, 1);
    /// RNR retry count (3 bits; 7 = infinite).
    rnr_retry_count: u8 = bits(50, 5, 3);
    /// Max CM retries (4 bits).
    max_cm_retries: u8 = bits(51, 0, 4);
    /// SRQ (1 bit).
    srq: u8 = bits(51, 4, 1);
    /// Extended transport type (3 bits; 1 = XRC with service type 3).
    extended_transport_type: u8 = bits(51, 5, 3);
    /// The primary path (bytes 52..96).
    primary_path: CmPath = req_path(52);
    /// The alternate path (bytes 96..140; absent when its local LID is 0).
    alternate_path: CmPath = req_path(96);
    /// SAP supported (1 bit).
    sap_supported: u8 = bits(139, 5, 1);
    /// Private data (92 bytes; RDMA-CM puts its `cma_hdr` first).
    private_data: [u8; 92] = bytes(140, 92);
}

cm_message! {
    /// MessageReceiptAcknowledgement (§12.6.6, Table 107).
    Mra, MraView = 0x0011;
    /// Local communication ID.
    local_comm_id: u32 = bits(0, 0, 32);
    /// Remote communication ID.
    remote_comm_id: u32 = bits(4, 0, 32);
    /// Message MRAed (2 bits): 0 REQ, 1 REP, 2 LAP.
    message_mraed: u8 = bits(8, 0, 2);
    /// Service timeout (5 bits; [`timeout_ns`]).
    service_timeout: u8 = bits(9, 0, 5);
    /// Private data (222 bytes).
    private_data: [u8; 222] = bytes(10, 222);
}

cm_message! {
    /// ConnectReject (§12.6.7, Table 108).
    Rej, RejView = 0x0012;
    /// Local communication ID.
    local_comm_id: u32 = bits(0, 0, 32);
    /// Remote communication ID.
    remote_comm_id: u32 = bits(4, 0, 32);
    /// Message rejected (2 bits): 0 REQ, 1 REP, 2 no message.
    message_rejected: u8 = bits(8, 0, 2);
    /// Reject info length (7 bits): bytes of ARI.
    reject_info_length: u8 = bits(9, 0, 7);
    /// Reason ([`rej_reason_name`]).
    reason: u16 = bits(10, 0, 16);
    /// Additional reject information (72 bytes).
    ari: [u8; 72] = bytes(12, 72);
    /// Private data (148 bytes).
    private_data: [u8; 148] = bytes(84, 148);
}

cm_message! {
    /// ConnectReply (§12.6.8, Table 110).
    Rep, RepView = 0x0013;
    /// Local communication ID.
    local_comm_id: u32 = bits(0, 0, 32);
    /// Remote communication ID.
    remote_comm_id: u32 = bits(4, 0, 32);
    /// Local Q_Key.
    local_q_key: u32 = bits(8, 0, 32);
    /// Local QPN (24 bits).
    local_qpn: u32 = bits(12, 0, 24);
    /// Vendor ID, high byte (ECE).
    vendor_id_h: u8 = bits(15, 0, 8);
    /// Local EE context number (24 bits).
    local_ee_context_number: u32 = bits(16, 0, 24);
    /// Vendor ID, middle byte.
    vendor_id_m: u8 = bits(19, 0, 8);
    /// Starting PSN (24 bits).
    starting_psn: u32 = bits(20, 0, 24);
    /// Vendor ID, low byte.
    vendor_id_l: u8 = bits(23, 0, 8);
    /// Responder resources.
    responder_resources: u8 = bits(24, 0, 8);
    /// Initiator depth.
    initiator_depth: u8 = bits(25, 0, 8);
    /// Target ACK delay (5 bits).
    target_ack_delay: u8 = bits(26, 0, 5);
    /// Failover accepted (2 bits).
    failover_accepted: u8 = bits(26, 5, 2);
    /// End-to-end flow control (1 bit).
    end_to_end_flow_control: u8 = bits(26, 7, 1);
    /// RNR retry count (3 bits).
    rnr_retry_count: u8 = bits(27, 0, 3);
    /// SRQ (1 bit).
    srq: u8 = bits(27, 3, 1);
    /// Local CA GUID.
    local_ca_guid: u64 = bits(28, 0, 64);
    /// Private data (196 bytes).
    private_data: [u8; 196] = bytes(36, 196);
}

cm_message! {
    /// ReadyToUse (§12.6.9, Table 111).
    Rtu, RtuView = 0x0014;
    /// Local communication ID.
    local_comm_id: u32 = bits(0, 0, 32);
    /// Remote communication ID.
    remote_comm_id: u32 = bits(4, 0, 32);
    /// Private data (224 bytes).
    private_data: [u8; 224] = bytes(8, 224);
}

cm_message! {
    /// DisconnectRequest (§12.6.10, Table 112).
    Dreq, DreqView = 0x0015;
    /// Local communication ID.
    local_comm_id: u32 = bits(0, 0, 32);
    /// Remote communication ID.
    remote_comm_id: u32 = bits(4, 0, 32);
    /// Remote QPN / EECN (24 bits).
    remote_qpn_eecn: u32 = bits(8, 0, 24);
    /// Private data (220 bytes).
    private_data: [u8; 220] = bytes(12, 220);
}

cm_message! {
    /// DisconnectReply (§12.6.11, Table 113).
    Drep, DrepView = 0x0016;
    /// Local communication ID.
    local_comm_id: u32 = bits(0, 0, 32);
    /// Remote communication ID.
    remote_comm_id: u32 = bits(4, 0, 32);
    /// Private data (224 bytes).
    private_data: [u8; 224] = bytes(8, 224);
}

cm_message! {
    /// ServiceIDResolutionRequest (§12.11.1, Table 119).
    SidrReq, SidrReqView = 0x0017;
    /// Request ID.
    request_id: u32 = bits(0, 0, 32);
    /// Partition key.
    partition_key: u16 = bits(4, 0, 16);
    /// Service ID.
    service_id: u64 = bits(8, 0, 64);
    /// Private data (216 bytes).
    private_data: [u8; 216] = bytes(16, 216);
}

cm_message! {
    /// ServiceIDResolutionResponse (§12.11.2, Table 120).
    SidrRep, SidrRepView = 0x0018;
    /// Request ID.
    request_id: u32 = bits(0, 0, 32);
    /// Status ([`sidr_status_name`]).
    status: u8 = bits(4, 0, 8);
    /// Additional information length.
    additional_information_length: u8 = bits(5, 0, 8);
    /// Vendor ID, high 16 bits (ECE).
    vendor_id_h: u16 = bits(6, 0, 16);
    /// QPN (24 bits).
    qpn: u32 = bits(8, 0, 24);
    /// Vendor ID, low byte.
    vendor_id_l: u8 = bits(11, 0, 8);
    /// Service ID.
    service_id: u64 = bits(12, 0, 64);
    /// Q_Key.
    q_key: u32 = bits(20, 0, 32);
    /// Additional information (72 bytes).
    additional_information: [u8; 72] = bytes(24, 72);
    /// Private data (136 bytes).
    private_data: [u8; 136] = bytes(96, 136);
}

cm_message! {
    /// LoadAlternatePath (§12.8.1, Table 115).
    Lap, LapView = 0x0019;
    /// Local communication ID.
    local_comm_id: u32 = bits(0, 0, 32);
    /// Remote communication ID.
    remote_comm_id: u32 = bits(4, 0, 32);
    /// Remote QPN / EECN (24 bits).
    remote_qpn_eecn: u32 = bits(12, 0, 24);
    /// Remote CM response timeout (5 bits).
    remote_cm_response_timeout: u8 = bits(15, 0, 5);
    /// The alternate path (bytes 20..64).
    alternate_path: CmPath = lap_path();
    /// Private data (168 bytes).
    private_data: [u8; 168] = bytes(64, 168);
}

cm_message! {
    /// AlternatePathResponse (§12.8.2, Table 116).
    Apr, AprView = 0x001a;
    /// Local communication ID.
    local_comm_id: u32 = bits(0, 0, 32);
    /// Remote communication ID.
    remote_comm_id: u32 = bits(4, 0, 32);
    /// Additional information length.
    additional_information_length: u8 = bits(8, 0, 8);
    /// Alternate-path status ([`apr_status_name`]).
    ap_status: u8 = bits(9, 0, 8);
    /// Additional information (72 bytes).
    additional_information: [u8; 72] = bytes(12, 72);
    /// Private data (148 bytes).
    private_data: [u8; 148] = bytes(84, 148);
}

cm_message! {
    /// ClassPortInfo (IBTA Vol 1 §13.4.8.1, Table 144): the class's capabilities and where to
    /// redirect requests or send traps; common to every management class (here read from the
    /// bytes after the common header, as the CM class carries it).
    ClassPortInfo, ClassPortInfoView = 0x0001;
    /// Base version.
    base_version: u8 = bits(0, 0, 8);
    /// Class version.
    class_version: u8 = bits(1, 0, 8);
    /// Capability mask.
    capability_mask: u16 = bits(2, 0, 16);
    /// Capability mask 2 (27 bits).
    capability_mask2: u32 = bits(4, 0, 27);
    /// Response time value (5 bits; [`timeout_ns`]).
    resp_time_value: u8 = bits(7, 3, 5);
    /// Redirect GID.
    redirect_gid: [u8; 16] = gid(8);
    /// Redirect traffic class.
    redirect_tc: u8 = bits(24, 0, 8);
    /// Redirect service level (4 bits).
    redirect_sl: u8 = bits(25, 0, 4);
    /// Redirect flow label (20 bits).
    redirect_fl: u32 = bits(25, 4, 20);
    /// Redirect LID.
    redirect_lid: u16 = bits(28, 0, 16);
    /// Redirect P_Key.
    redirect_p_key: u16 = bits(30, 0, 16);
    /// Redirect QP (24 bits).
    redirect_qp: u32 = bits(33, 0, 24);
    /// Redirect Q_Key.
    redirect_q_key: u32 = bits(36, 0, 32);
    /// Trap GID.
    trap_gid: [u8; 16] = gid(40);
    /// Trap traffic class.
    trap_tc: u8 = bits(56, 0, 8);
    /// Trap service level (4 bits).
    trap_sl: u8 = bits(57, 0, 4);
    /// Trap flow label (20 bits).
    trap_fl: u32 = bits(57, 4, 20);
    /// Trap LID.
    trap_lid: u16 = bits(60, 0, 16);
    /// Trap P_Key.
    trap_p_key: u16 = bits(62, 0, 16);
    /// Trap hop limit.
    trap_hl: u8 = bits(64, 0, 8);
    /// Trap QP (24 bits).
    trap_qp: u32 = bits(65, 0, 24);
    /// Trap Q_Key.
    trap_q_key: u32 = bits(68, 0, 32);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rdma_cm.pcap` frame 1: the 232 CM bytes of an rxe REQ (from MAD byte 24).
    fn captured_req() -> [u8; DATA_LEN] {
        let hex = concat!(
            "64c0c56d000000000000000001064853025056fffea77d03000000000000000000003d0000000000",
            "000000a07cc204a7ffff37f0ffffffff00000000000000000000ffff0a01103e00000000000000000000ffff0a01103d91a3c000004000880000000000000000",
            "0000000000000000000000000000000000000000000000000000000000000000000000000040ccf70000000000000000000000000a01103e0000000000000000",
            "000000000a01103d0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
        );
        let mut d = [0u8; DATA_LEN];
        for (i, b) in d.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
        }
        d
    }

    #[test]
    fn a_captured_req_decodes_field_by_field() {
        let d = captured_req();
        let r = Req::parse(&d).unwrap();
        assert_eq!(r.local_comm_id, 0x64c0_c56d);
        assert_eq!(r.service_id, 0x0000_0000_0106_4853);
        assert_eq!(r.local_ca_guid, 0x0250_56ff_fea7_7d03);
        assert_eq!(r.local_qpn, 0x3d);
        assert_eq!(r.starting_psn, 0x7c_c204);
        assert_eq!(r.remote_cm_response_timeout, 0x14);
        assert_eq!(r.local_cm_response_timeout, 0x14);
        assert_eq!(r.retry_count, 7);
        assert_eq!(r.rnr_retry_count, 7);
        assert_eq!(r.max_cm_retries, 15);
        assert_eq!(r.partition_key, 0xffff);
        assert_eq!(path_mtu_bytes(r.path_packet_payload_mtu), Some(1024));
        assert_eq!(transport_service_name(r.transport_service_type), "RC");
        let p = r.primary_path;
        assert_eq!((p.local_port_lid, p.remote_port_lid), (0xffff, 0xffff));
        assert_eq!(p.local_port_gid[10..], [0xff, 0xff, 10, 1, 16, 62]);
        assert_eq!(p.remote_port_gid[12..], [10, 1, 16, 61]);
        assert_eq!(p.flow_label, 0x91a3c);
        assert_eq!(p.packet_rate, 0);
        assert_eq!(p.hop_limit, 0x40);
        assert_eq!(p.local_ack_timeout, 0x11);
        assert_eq!(r.alternate_path, CmPath::default());
        // Emitting gives the same bytes back.
        let mut out = [0u8; DATA_LEN];
        r.emit(&mut out);
        assert_eq!(out, d);
        assert!(Req::parse(&d[..231]).is_err());
    }

    #[test]
    fn every_message_round_trips_through_its_bytes() {
        // Each message with every field set to a recognisable value (the widest its bits
        // allow, so a misplaced or overlapping field shows).
        let mut fields_seen = 0;
        for kind in MessageKind::ALL {
            let mut data = [0u8; DATA_LEN];
            for (i, b) in data.iter_mut().enumerate() {
                *b = (i as u8).wrapping_mul(37) ^ 0x5a;
            }
            let m = Message::parse(kind.attribute_id(), &data).expect("every kind parses");
            let m = m.unwrap();
            assert_eq!(m.kind(), kind);
            let mut out = [0u8; DATA_LEN];
            m.emit(&mut out);
            let again = Message::parse(kind.attribute_id(), &out).unwrap().unwrap();
            assert_eq!(again, m, "{kind:?}");
            m.visit(&mut |_, _| fields_seen += 1);
        }
        assert!(fields_seen > 80, "{fields_seen}");
    }

    #[test]
    fn names_and_encodings() {
        assert_eq!(rej_reason_name(28), Some("consumer_reject"));
        assert_eq!(rej_reason_name(34), None);
        assert_eq!(path_mtu_code(4096), Some(5));
        assert_eq!(path_mtu_bytes(0), None);
        assert_eq!(timeout_ns(20), 4096 << 20);
        assert_eq!(rate_name(3), Some("10G"));
        assert_eq!(MessageKind::from_attribute(0x13), Some(MessageKind::Rep));
        assert_eq!(MessageKind::from_attribute(0x99), None);
        assert_eq!(sidr_status_name(2), Some("reject"));
        assert_eq!(apr_status_name(13), Some("invalid_sl"));
    }

    #[test]
    fn every_message_kind_is_named_by_the_mad_layer() {
        for k in MessageKind::ALL {
            assert_ne!(k.long_name(), "?", "{k:?}");
        }
        assert_eq!(MessageKind::Req.long_name(), "ConnectRequest");
        assert_eq!(MessageKind::ClassPortInfo.long_name(), "ClassPortInfo");
    }
}
