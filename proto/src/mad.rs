//! Management datagrams (IBTA Vol 1 §13.4): the 256-byte MADs that subnet management (QP0),
//! subnet administration, communication management and the other management classes carry in
//! UD SENDs to QP0 and QP1 (Q_Key 0x80010000 on QP1).
//!
//! * [`Packet`] / [`Repr`]: the 24-byte common header (§13.4.2): base version, management
//!   class, class version, method (with the response bit), status, class-specific word,
//!   transaction ID, attribute ID and modifier.
//! * [`MgmtClass`], [`Method`], [`Status`] name their values; [`attribute_name`] names the
//!   attributes of the subnet-management, subnet-administration, performance and CM classes.
//! * [`SmpRepr`]: the subnet-management header (§14.2.1: M_Key; directed route: hop pointer and
//!   count, DrSLID, DrDLID, the D bit); [`SaRepr`]: the RMPP and SA headers (§13.6.2, §15.2.1:
//!   SM_Key, AttributeOffset, ComponentMask).
//! * The CM messages inside class 0x07 are in `cm` (which builds on this module; their
//!   attribute names are in [`attribute_name`] with every other class's).
//!
//! Unknown classes, methods and attributes decode as their numbers, never as errors.
use crate::wire::{be16, be32, be64, fixed_view, get_bits, put16, put32, put64, set_bits};
use crate::{Layer, Result};

/// Bytes of a MAD.
pub const MAD_LEN: usize = 256;
/// Bytes of the common header.
pub const HEADER_LEN: usize = 24;
/// Bytes after the common header.
pub const DATA_LEN: usize = MAD_LEN - HEADER_LEN;

/// The management class (§13.4.4, Table 137).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MgmtClass(pub u8);

impl MgmtClass {
    /// Subnet management, LID-routed.
    pub const SUBN_LID_ROUTED: Self = Self(0x01);
    /// Subnet management, directed route.
    pub const SUBN_DIRECTED_ROUTE: Self = Self(0x81);
    /// Subnet administration.
    pub const SUBN_ADM: Self = Self(0x03);
    /// Performance management.
    pub const PERF_MGT: Self = Self(0x04);
    /// Baseboard management.
    pub const BM: Self = Self(0x05);
    /// Device management.
    pub const DEV_MGT: Self = Self(0x06);
    /// Communication management.
    pub const CM: Self = Self(0x07);
    /// SNMP tunnelling.
    pub const SNMP: Self = Self(0x08);
    /// Device administration.
    pub const DEV_ADM: Self = Self(0x10);
    /// Boot management.
    pub const BOOT_MGT: Self = Self(0x11);
    /// BIS.
    pub const BIS: Self = Self(0x12);
    /// Congestion control (Annex A10).
    pub const CONG_MGT: Self = Self(0x21);

    /// The class's name, or `None` for a reserved value.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x01 => "SubnMgt",
            0x81 => "SubnMgtDR",
            0x03 => "SubnAdm",
            0x04 => "PerfMgt",
            0x05 => "BM",
            0x06 => "DevMgt",
            0x07 => "CM",
            0x08 => "SNMP",
            0x09..=0x0f => "Vendor",
            0x10 => "DevAdm",
            0x11 => "BootMgt",
            0x12 => "BIS",
            0x21 => "CongMgt",
            0x30..=0x4f => "VendorOUI",
            _ => return None,
        })
    }

    /// The short name used for filters and JSON (`"smp"`, `"smp_dr"`, `"sa"`, `"perf"`, `"cm"`, …).
    pub const fn key(self) -> Option<&'static str> {
        Some(match self.0 {
            0x01 => "smp",
            0x81 => "smp_dr",
            0x03 => "sa",
            0x04 => "perf",
            0x05 => "bm",
            0x06 => "dev_mgt",
            0x07 => "cm",
            0x08 => "snmp",
            0x09..=0x0f | 0x30..=0x4f => "vendor",
            0x10 => "dev_adm",
            0x11 => "boot_mgt",
            0x12 => "bis",
            0x21 => "cong_mgt",
            _ => return None,
        })
    }

    /// The class a [`MgmtClass::key`] names.
    pub fn from_key(key: &str) -> Option<Self> {
        [
            0x01u8, 0x81, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x10, 0x11, 0x12, 0x21,
        ]
        .into_iter()
        .map(Self)
        .find(|c| c.key().is_some_and(|k| k.eq_ignore_ascii_case(key)))
    }

    /// A subnet-management class (LID-routed or directed route).
    pub const fn is_subn_mgt(self) -> bool {
        self.0 == 0x01 || self.0 == 0x81
    }
}

/// The method (§13.4.5, Table 138), with the response bit (0x80).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Method(pub u8);

impl Method {
    /// Get.
    pub const GET: Self = Self(0x01);
    /// Set.
    pub const SET: Self = Self(0x02);
    /// Send.
    pub const SEND: Self = Self(0x03);
    /// Trap.
    pub const TRAP: Self = Self(0x05);
    /// Report.
    pub const REPORT: Self = Self(0x06);
    /// TrapRepress.
    pub const TRAP_REPRESS: Self = Self(0x07);
    /// GetResp.
    pub const GET_RESP: Self = Self(0x81);
    /// ReportResp.
    pub const REPORT_RESP: Self = Self(0x86);
    /// GetTable (SA).
    pub const GET_TABLE: Self = Self(0x12);
    /// GetTableResp (SA).
    pub const GET_TABLE_RESP: Self = Self(0x92);

    /// `true` when the response bit is set.
    pub const fn is_response(self) -> bool {
        self.0 & 0x80 != 0 && self.0 != 0x07
    }

    /// The method's name, or `None` for an unassigned value.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x01 => "Get",
            0x02 => "Set",
            0x03 => "Send",
            0x05 => "Trap",
            0x06 => "Report",
            0x07 => "TrapRepress",
            0x12 => "GetTable",
            0x13 => "GetTraceTable",
            0x14 => "GetMulti",
            0x15 => "Delete",
            0x81 => "GetResp",
            0x86 => "ReportResp",
            0x92 => "GetTableResp",
            0x94 => "GetMultiResp",
            0x95 => "DeleteResp",
            _ => return None,
        })
    }
}

/// The status word (§13.4.7, Table 139). In a directed-route SMP its top bit is the D bit
/// (direction) instead, and the status proper is 15 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Status(pub u16);

impl Status {
    /// Busy: the request was dropped, try again.
    pub const fn busy(self) -> bool {
        self.0 & 1 != 0
    }
    /// Redirect required.
    pub const fn redirect(self) -> bool {
        self.0 & 2 != 0
    }
    /// The invalid-field code (bits 2..4): 0 none.
    pub const fn invalid_field(self) -> u8 {
        (self.0 >> 2 & 7) as u8
    }
    /// What [`Status::invalid_field`] means.
    pub const fn invalid_field_name(self) -> Option<&'static str> {
        match self.invalid_field() {
            0 => None,
            1 => Some("bad_version"),
            2 => Some("method_not_supported"),
            3 => Some("method_attribute_not_supported"),
            7 => Some("invalid_attribute_or_modifier"),
            _ => Some("reserved"),
        }
    }
    /// The class-specific status (bits 8..15; for directed-route SMPs bits 8..14).
    pub const fn class_specific(self) -> u8 {
        (self.0 >> 8) as u8
    }
}

/// The name of attribute `id` of `class`, when the class defines it (§14.2.5 for subnet
/// management, §15.2.5 for subnet administration, §16.1.3 for performance management, §12.6
/// for CM; ClassPortInfo, Notice and InformInfo are common).
pub fn attribute_name(class: MgmtClass, id: u16) -> Option<&'static str> {
    let common = match id {
        0x0001 => Some("ClassPortInfo"),
        0x0002 => Some("Notice"),
        0x0003 => Some("InformInfo"),
        _ => None,
    };
    let specific = match class.0 {
        0x01 | 0x81 => match id {
            0x0010 => Some("NodeDescription"),
            0x0011 => Some("NodeInfo"),
            0x0012 => Some("SwitchInfo"),
            0x0014 => Some("GUIDInfo"),
            0x0015 => Some("PortInfo"),
            0x0016 => Some("P_KeyTable"),
            0x0017 => Some("SLtoVLMappingTable"),
            0x0018 => Some("VLArbitrationTable"),
            0x0019 => Some("LinearForwardingTable"),
            0x001a => Some("RandomForwardingTable"),
            0x001b => Some("MulticastForwardingTable"),
            0x001c => Some("LinkSpeedWidthPairsTable"),
            0x0020 => Some("SMInfo"),
            0x0030 => Some("VendorDiag"),
            0x0031 => Some("LedInfo"),
            _ => None,
        },
        0x03 => match id {
            0x0011 => Some("NodeRecord"),
            0x0012 => Some("PortInfoRecord"),
            0x0013 => Some("SLtoVLMappingTableRecord"),
            0x0014 => Some("SwitchInfoRecord"),
            0x0015 => Some("LinearForwardingTableRecord"),
            0x0016 => Some("RandomForwardingTableRecord"),
            0x0017 => Some("MulticastForwardingTableRecord"),
            0x0018 => Some("SMInfoRecord"),
            0x0019 => Some("LinkSpeedWidthPairsTableRecord"),
            0x0020 => Some("LinkRecord"),
            0x0030 => Some("GuidInfoRecord"),
            0x0031 => Some("ServiceRecord"),
            0x0033 => Some("P_KeyTableRecord"),
            0x0035 => Some("PathRecord"),
            0x0036 => Some("VLArbitrationTableRecord"),
            0x0038 => Some("MCMemberRecord"),
            0x0039 => Some("TraceRecord"),
            0x003a => Some("MultiPathRecord"),
            0x003b => Some("ServiceAssociationRecord"),
            0x00f3 => Some("InformInfoRecord"),
            _ => None,
        },
        0x04 => match id {
            0x0010 => Some("PortSamplesControl"),
            0x0011 => Some("PortSamplesResult"),
            0x0012 => Some("PortCounters"),
            0x001d => Some("PortCountersExtended"),
            0x001e => Some("PortSamplesResultExtended"),
            0x0036 => Some("PortXmitDataSL"),
            0x0037 => Some("PortRcvDataSL"),
            _ => None,
        },
        0x07 => match id {
            0x0010 => Some("ConnectRequest"),
            0x0011 => Some("MsgRcptAck"),
            0x0012 => Some("ConnectReject"),
            0x0013 => Some("ConnectReply"),
            0x0014 => Some("ReadyToUse"),
            0x0015 => Some("DisconnectRequest"),
            0x0016 => Some("DisconnectReply"),
            0x0017 => Some("ServiceIDResReq"),
            0x0018 => Some("ServiceIDResReqResp"),
            0x0019 => Some("LoadAlternatePath"),
            0x001a => Some("AlternatePathResponse"),
            _ => None,
        },
        _ => None,
    };
    specific.or(common)
}

mod field {
    use crate::Field;
    pub(super) const BASE_VERSION: usize = 0;
    pub(super) const MGMT_CLASS: usize = 1;
    pub(super) const CLASS_VERSION: usize = 2;
    pub(super) const METHOD: usize = 3;
    pub(super) const STATUS: Field = 4..6;
    pub(super) const CLASS_SPECIFIC: Field = 6..8;
    pub(super) const TID: Field = 8..16;
    pub(super) const ATTR_ID: Field = 16..18;
    pub(super) const RESV: Field = 18..20;
    pub(super) const ATTR_MOD: Field = 20..24;
}

/// A view of a MAD: the common header, and whatever of the rest the buffer holds (a capture
/// cut by its snap length may hold less than 256 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

fixed_view!(Layer::Mad, HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Base version (1).
    pub fn base_version(&self) -> u8 {
        self.buffer.as_ref()[field::BASE_VERSION]
    }
    /// Management class.
    pub fn mgmt_class(&self) -> MgmtClass {
        MgmtClass(self.buffer.as_ref()[field::MGMT_CLASS])
    }
    /// Class version.
    pub fn class_version(&self) -> u8 {
        self.buffer.as_ref()[field::CLASS_VERSION]
    }
    /// Method, with the response bit.
    pub fn method(&self) -> Method {
        Method(self.buffer.as_ref()[field::METHOD])
    }
    /// Status.
    pub fn status(&self) -> Status {
        Status(be16(&self.buffer.as_ref()[field::STATUS]))
    }
    /// The class-specific word.
    pub fn class_specific(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::CLASS_SPECIFIC])
    }
    /// Transaction ID.
    pub fn transaction_id(&self) -> u64 {
        be64(&self.buffer.as_ref()[field::TID])
    }
    /// Attribute ID.
    pub fn attribute_id(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::ATTR_ID])
    }
    /// The reserved word after the attribute ID.
    pub fn reserved(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::RESV])
    }
    /// Attribute modifier.
    pub fn attribute_modifier(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::ATTR_MOD])
    }
    /// The bytes after the common header that the buffer holds (up to [`DATA_LEN`]).
    pub fn data(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[HEADER_LEN.min(b.len())..b.len().min(MAD_LEN)]
    }
    /// `true` when the buffer holds the whole 256-byte MAD.
    pub fn is_complete(&self) -> bool {
        self.buffer.as_ref().len() >= MAD_LEN
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// The bytes after the common header, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        let b = self.buffer.as_mut();
        let end = b.len().min(MAD_LEN);
        &mut b[HEADER_LEN.min(end)..end]
    }
}

/// An owned MAD common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// Base version (1).
    pub base_version: u8,
    /// Management class.
    pub mgmt_class: MgmtClass,
    /// Class version (SM 1, SA 2, CM 2).
    pub class_version: u8,
    /// Method, with the response bit.
    pub method: Method,
    /// Status.
    pub status: Status,
    /// The class-specific word (directed-route SMP: hop pointer and hop count).
    pub class_specific: u16,
    /// Transaction ID.
    pub transaction_id: u64,
    /// Attribute ID.
    pub attribute_id: u16,
    /// Reserved (send 0).
    pub reserved: u16,
    /// Attribute modifier.
    pub attribute_modifier: u32,
}

impl Repr {
    /// Reads the common header.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(Self {
            base_version: p.base_version(),
            mgmt_class: p.mgmt_class(),
            class_version: p.class_version(),
            method: p.method(),
            status: p.status(),
            class_specific: p.class_specific(),
            transaction_id: p.transaction_id(),
            attribute_id: p.attribute_id(),
            reserved: p.reserved(),
            attribute_modifier: p.attribute_modifier(),
        })
    }

    /// Writes the common header into the first [`HEADER_LEN`] bytes.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..HEADER_LEN];
        b[field::BASE_VERSION] = self.base_version;
        b[field::MGMT_CLASS] = self.mgmt_class.0;
        b[field::CLASS_VERSION] = self.class_version;
        b[field::METHOD] = self.method.0;
        put16(&mut b[field::STATUS], self.status.0);
        put16(&mut b[field::CLASS_SPECIFIC], self.class_specific);
        put64(&mut b[field::TID], self.transaction_id);
        put16(&mut b[field::ATTR_ID], self.attribute_id);
        put16(&mut b[field::RESV], self.reserved);
        put32(&mut b[field::ATTR_MOD], self.attribute_modifier);
    }

    /// The attribute's name, when known ([`attribute_name`]).
    pub fn attribute_name(&self) -> Option<&'static str> {
        attribute_name(self.mgmt_class, self.attribute_id)
    }
}

/// The subnet-management header after the common one (§14.2.1.1, §14.2.1.2; MAD bytes
/// 24..64): the M_Key and, for directed-route SMPs, the route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SmpRepr {
    /// Directed route (class 0x81) rather than LID-routed.
    pub directed: bool,
    /// M_Key.
    pub m_key: u64,
    /// Directed route: the D bit (status bit 15): set on the way back.
    pub direction: bool,
    /// Directed route: hop pointer (class-specific high byte).
    pub hop_pointer: u8,
    /// Directed route: hop count (class-specific low byte).
    pub hop_count: u8,
    /// Directed route: DrSLID.
    pub dr_slid: u16,
    /// Directed route: DrDLID.
    pub dr_dlid: u16,
}

/// Bytes of a MAD the [`SmpRepr`] needs.
pub const SMP_HEADER_LEN: usize = 64;

impl SmpRepr {
    /// Reads it from a whole MAD (at least [`SMP_HEADER_LEN`] bytes).
    pub fn parse(mad: &[u8]) -> Result<Self> {
        crate::error::need(Layer::Mad, mad, SMP_HEADER_LEN)?;
        let directed = mad[1] == MgmtClass::SUBN_DIRECTED_ROUTE.0;
        let status = be16(&mad[4..6]);
        Ok(Self {
            directed,
            m_key: be64(&mad[24..32]),
            direction: directed && status & 0x8000 != 0,
            hop_pointer: if directed { mad[6] } else { 0 },
            hop_count: if directed { mad[7] } else { 0 },
            dr_slid: if directed { be16(&mad[32..34]) } else { 0 },
            dr_dlid: if directed { be16(&mad[34..36]) } else { 0 },
        })
    }

    /// Writes the M_Key and the route fields (and the D bit) into a MAD whose common header
    /// is already written.
    ///
    /// # Panics
    /// If the buffer is shorter than [`SMP_HEADER_LEN`].
    pub fn emit(&self, mad: &mut [u8]) {
        put64(&mut mad[24..32], self.m_key);
        if self.directed {
            mad[6] = self.hop_pointer;
            mad[7] = self.hop_count;
            set_bits(mad, 4, 0, 1, u64::from(self.direction));
            put16(&mut mad[32..34], self.dr_slid);
            put16(&mut mad[34..36], self.dr_dlid);
        }
    }
}

/// The RMPP header (§13.6.2; MAD bytes 24..36) of the classes that segment (SA, vendor range 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RmppRepr {
    /// RMPP version (1; 0: not used).
    pub version: u8,
    /// Type: 0 none, 1 DATA, 2 ACK, 3 STOP, 4 ABORT.
    pub rmpp_type: u8,
    /// Response time (5 bits).
    pub resp_time: u8,
    /// Flags (3 bits): 1 active, 2 first, 4 last.
    pub flags: u8,
    /// Status.
    pub status: u8,
    /// Segment number (DATA) / …
    pub data1: u32,
    /// Payload length (DATA) / new window last (ACK).
    pub data2: u32,
}

/// The subnet-administration header (§15.2.1.1; MAD bytes 24..56): RMPP, SM_Key,
/// AttributeOffset, ComponentMask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SaRepr {
    /// The RMPP header.
    pub rmpp: RmppRepr,
    /// SM_Key.
    pub sm_key: u64,
    /// AttributeOffset: record size in 8-byte words (GetTable responses).
    pub attribute_offset: u16,
    /// ComponentMask: which record fields are set.
    pub component_mask: u64,
}

/// Bytes of a MAD the [`SaRepr`] needs.
pub const SA_HEADER_LEN: usize = 56;

impl RmppRepr {
    /// Reads it from MAD bytes 24..36.
    pub fn parse(mad: &[u8]) -> Result<Self> {
        crate::error::need(Layer::Mad, mad, 36)?;
        Ok(Self {
            version: mad[24],
            rmpp_type: mad[25],
            resp_time: (get_bits(mad, 26, 0, 5)) as u8,
            flags: mad[26] & 7,
            status: mad[27],
            data1: be32(&mad[28..32]),
            data2: be32(&mad[32..36]),
        })
    }

    /// Writes it into MAD bytes 24..36.
    ///
    /// # Panics
    /// If the buffer is shorter than 36 bytes.
    pub fn emit(&self, mad: &mut [u8]) {
        mad[24] = self.version;
        mad[25] = self.rmpp_type;
        mad[26] = (self.resp_time & 0x1f) << 3 | self.flags & 7;
        mad[27] = self.status;
        put32(&mut mad[28..32], self.data1);
        put32(&mut mad[32..36], self.data2);
    }
}

impl SaRepr {
    /// Reads it from a whole MAD (at least [`SA_HEADER_LEN`] bytes).
    pub fn parse(mad: &[u8]) -> Result<Self> {
        crate::error::need(Layer::Mad, mad, SA_HEADER_LEN)?;
        Ok(Self {
            rmpp: RmppRepr::parse(mad)?,
            sm_key: be64(&mad[36..44]),
            attribute_offset: be16(&mad[44..46]),
            component_mask: be64(&mad[48..56]),
        })
    }

    /// Writes it into MAD bytes 24..56.
    ///
    /// # Panics
    /// If the buffer is shorter than [`SA_HEADER_LEN`].
    pub fn emit(&self, mad: &mut [u8]) {
        self.rmpp.emit(mad);
        put64(&mut mad[36..44], self.sm_key);
        put16(&mut mad[44..46], self.attribute_offset);
        put16(&mut mad[46..48], 0);
        put64(&mut mad[48..56], self.component_mask);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CM REQ of `rdma_cm.pcap` frame 1 (rxe): its first 32 bytes.
    const REQ_HEAD: [u8; 32] = [
        0x01, 0x07, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x6d, 0xc5, 0xc0,
        0x64, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x64, 0xc0, 0xc5, 0x6d, 0, 0, 0, 0,
    ];

    #[test]
    fn common_header_of_a_captured_req() {
        let p = Packet::new_checked(&REQ_HEAD[..]).unwrap();
        let r = Repr::parse(&p).unwrap();
        assert_eq!(r.base_version, 1);
        assert_eq!(r.mgmt_class, MgmtClass::CM);
        assert_eq!(r.class_version, 2);
        assert_eq!(r.method, Method::SEND);
        assert_eq!(r.transaction_id, 0x0000_0002_6dc5_c064);
        assert_eq!(r.attribute_id, 0x0010);
        assert_eq!(r.attribute_name(), Some("ConnectRequest"));
        assert!(!p.is_complete());
        assert_eq!(p.data().len(), 8);
        let mut out = [0xffu8; 24];
        r.emit(&mut out);
        assert_eq!(out, REQ_HEAD[..24]);
    }

    #[test]
    fn names_and_keys() {
        assert_eq!(MgmtClass(0x81).name(), Some("SubnMgtDR"));
        assert_eq!(MgmtClass::from_key("cm"), Some(MgmtClass::CM));
        assert_eq!(MgmtClass::from_key("SA"), Some(MgmtClass::SUBN_ADM));
        assert_eq!(MgmtClass::from_key("nope"), None);
        assert_eq!(MgmtClass(0x33).key(), Some("vendor"));
        assert_eq!(MgmtClass(0x77).name(), None);
        assert_eq!(Method(0x81).name(), Some("GetResp"));
        assert!(Method::GET_RESP.is_response() && !Method::TRAP_REPRESS.is_response());
        assert_eq!(attribute_name(MgmtClass(0x81), 0x20), Some("SMInfo"));
        assert_eq!(
            attribute_name(MgmtClass::SUBN_ADM, 0x35),
            Some("PathRecord")
        );
        assert_eq!(attribute_name(MgmtClass::CM, 1), Some("ClassPortInfo"));
        assert_eq!(
            attribute_name(MgmtClass::PERF_MGT, 0x12),
            Some("PortCounters")
        );
        assert_eq!(attribute_name(MgmtClass(0x09), 0x1234), None);
        let s = Status(0x001d);
        assert!(s.busy() && !s.redirect());
        assert_eq!(
            s.invalid_field_name(),
            Some("invalid_attribute_or_modifier")
        );
    }

    #[test]
    fn smp_and_sa_headers_round_trip() {
        let mut mad = [0u8; MAD_LEN];
        Repr {
            base_version: 1,
            mgmt_class: MgmtClass::SUBN_DIRECTED_ROUTE,
            class_version: 1,
            method: Method::GET_RESP,
            class_specific: 0x0102,
            attribute_id: 0x20,
            ..Repr::default()
        }
        .emit(&mut mad);
        let smp = SmpRepr {
            directed: true,
            m_key: 7,
            direction: true,
            hop_pointer: 1,
            hop_count: 2,
            dr_slid: 0xffff,
            dr_dlid: 0xffff,
        };
        smp.emit(&mut mad);
        assert_eq!(be16(&mad[4..6]), 0x8000);
        assert_eq!(SmpRepr::parse(&mad).unwrap(), smp);
        let sa = SaRepr {
            rmpp: RmppRepr {
                version: 1,
                rmpp_type: 1,
                resp_time: 0x11,
                flags: 7,
                status: 0,
                data1: 1,
                data2: 200,
            },
            sm_key: 0x1122,
            attribute_offset: 8,
            component_mask: 0x340c,
        };
        sa.emit(&mut mad);
        assert_eq!(SaRepr::parse(&mad).unwrap(), sa);
        assert!(SaRepr::parse(&mad[..55]).is_err());
        assert!(SmpRepr::parse(&mad[..63]).is_err());
    }
}
