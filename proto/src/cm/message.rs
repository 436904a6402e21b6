//! Any CM message: [`MessageKind`] (which one an attribute ID names), [`Message`] (an owned
//! message of any kind) and [`MessageView`] (one read in place), over the per-message types
//! of the parent module.
use super::*;

/// Which CM message an attribute ID names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageKind {
    /// ClassPortInfo (0x0001).
    ClassPortInfo,
    /// REQ.
    Req,
    /// MRA.
    Mra,
    /// REJ.
    Rej,
    /// REP.
    Rep,
    /// RTU.
    Rtu,
    /// DREQ.
    Dreq,
    /// DREP.
    Drep,
    /// SIDR_REQ.
    SidrReq,
    /// SIDR_REP.
    SidrRep,
    /// LAP.
    Lap,
    /// APR.
    Apr,
}

impl MessageKind {
    /// Every kind.
    pub const ALL: [Self; 12] = [
        Self::ClassPortInfo,
        Self::Req,
        Self::Mra,
        Self::Rej,
        Self::Rep,
        Self::Rtu,
        Self::Dreq,
        Self::Drep,
        Self::SidrReq,
        Self::SidrRep,
        Self::Lap,
        Self::Apr,
    ];

    /// The attribute ID.
    pub const fn attribute_id(self) -> u16 {
        match self {
            Self::ClassPortInfo => ClassPortInfo::ATTRIBUTE_ID,
            Self::Req => Req::ATTRIBUTE_ID,
            Self::Mra => Mra::ATTRIBUTE_ID,
            Self::Rej => Rej::ATTRIBUTE_ID,
            Self::Rep => Rep::ATTRIBUTE_ID,
            Self::Rtu => Rtu::ATTRIBUTE_ID,
            Self::Dreq => Dreq::ATTRIBUTE_ID,
            Self::Drep => Drep::ATTRIBUTE_ID,
            Self::SidrReq => SidrReq::ATTRIBUTE_ID,
            Self::SidrRep => SidrRep::ATTRIBUTE_ID,
            Self::Lap => Lap::ATTRIBUTE_ID,
            Self::Apr => Apr::ATTRIBUTE_ID,
        }
    }

    /// The kind of an attribute ID of the CM class.
    pub fn from_attribute(id: u16) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.attribute_id() == id)
    }

    /// The short name (`"REQ"`, `"SIDR_REP"`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Self::ClassPortInfo => "ClassPortInfo",
            Self::Req => "REQ",
            Self::Mra => "MRA",
            Self::Rej => "REJ",
            Self::Rep => "REP",
            Self::Rtu => "RTU",
            Self::Dreq => "DREQ",
            Self::Drep => "DREP",
            Self::SidrReq => "SIDR_REQ",
            Self::SidrRep => "SIDR_REP",
            Self::Lap => "LAP",
            Self::Apr => "APR",
        }
    }

    /// The IBTA attribute name (`"ConnectRequest"`, …; Wireshark's too).
    pub fn long_name(self) -> &'static str {
        // One table of attribute names for every class: the MAD layer's.
        crate::mad::attribute_name(crate::mad::MgmtClass::CM, self.attribute_id()).unwrap_or("?")
    }
}

/// A CM message of any kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// ClassPortInfo.
    ClassPortInfo(ClassPortInfo),
    /// REQ.
    Req(Req),
    /// MRA.
    Mra(Mra),
    /// REJ.
    Rej(Rej),
    /// REP.
    Rep(Rep),
    /// RTU.
    Rtu(Rtu),
    /// DREQ.
    Dreq(Dreq),
    /// DREP.
    Drep(Drep),
    /// SIDR_REQ.
    SidrReq(SidrReq),
    /// SIDR_REP.
    SidrRep(SidrRep),
    /// LAP.
    Lap(Lap),
    /// APR.
    Apr(Apr),
}

impl Message {
    /// Parses the message an attribute ID names from the 232 bytes after the MAD common
    /// header; `None` for IDs the CM class does not define.
    pub fn parse(attribute_id: u16, data: &[u8]) -> Option<Result<Self>> {
        Some(match MessageKind::from_attribute(attribute_id)? {
            MessageKind::ClassPortInfo => ClassPortInfo::parse(data).map(Self::ClassPortInfo),
            MessageKind::Req => Req::parse(data).map(Self::Req),
            MessageKind::Mra => Mra::parse(data).map(Self::Mra),
            MessageKind::Rej => Rej::parse(data).map(Self::Rej),
            MessageKind::Rep => Rep::parse(data).map(Self::Rep),
            MessageKind::Rtu => Rtu::parse(data).map(Self::Rtu),
            MessageKind::Dreq => Dreq::parse(data).map(Self::Dreq),
            MessageKind::Drep => Drep::parse(data).map(Self::Drep),
            MessageKind::SidrReq => SidrReq::parse(data).map(Self::SidrReq),
            MessageKind::SidrRep => SidrRep::parse(data).map(Self::SidrRep),
            MessageKind::Lap => Lap::parse(data).map(Self::Lap),
            MessageKind::Apr => Apr::parse(data).map(Self::Apr),
        })
    }

    /// Its kind.
    pub const fn kind(&self) -> MessageKind {
        match self {
            Self::ClassPortInfo(_) => MessageKind::ClassPortInfo,
            Self::Req(_) => MessageKind::Req,
            Self::Mra(_) => MessageKind::Mra,
            Self::Rej(_) => MessageKind::Rej,
            Self::Rep(_) => MessageKind::Rep,
            Self::Rtu(_) => MessageKind::Rtu,
            Self::Dreq(_) => MessageKind::Dreq,
            Self::Drep(_) => MessageKind::Drep,
            Self::SidrReq(_) => MessageKind::SidrReq,
            Self::SidrRep(_) => MessageKind::SidrRep,
            Self::Lap(_) => MessageKind::Lap,
            Self::Apr(_) => MessageKind::Apr,
        }
    }

    /// Writes it into the 232 bytes after the MAD common header (zeroed first).
    ///
    /// # Panics
    /// If `data` is shorter than 232 bytes.
    pub fn emit(&self, data: &mut [u8]) {
        data[..DATA_LEN].fill(0);
        match self {
            Self::ClassPortInfo(m) => m.emit(data),
            Self::Req(m) => m.emit(data),
            Self::Mra(m) => m.emit(data),
            Self::Rej(m) => m.emit(data),
            Self::Rep(m) => m.emit(data),
            Self::Rtu(m) => m.emit(data),
            Self::Dreq(m) => m.emit(data),
            Self::Drep(m) => m.emit(data),
            Self::SidrReq(m) => m.emit(data),
            Self::SidrRep(m) => m.emit(data),
            Self::Lap(m) => m.emit(data),
            Self::Apr(m) => m.emit(data),
        }
    }

    /// Every field by its IBTA name.
    pub fn visit(&self, v: &mut dyn FnMut(&'static str, Value<'_>)) {
        match self {
            Self::ClassPortInfo(m) => m.visit(v),
            Self::Req(m) => m.visit(v),
            Self::Mra(m) => m.visit(v),
            Self::Rej(m) => m.visit(v),
            Self::Rep(m) => m.visit(v),
            Self::Rtu(m) => m.visit(v),
            Self::Dreq(m) => m.visit(v),
            Self::Drep(m) => m.visit(v),
            Self::SidrReq(m) => m.visit(v),
            Self::SidrRep(m) => m.visit(v),
            Self::Lap(m) => m.visit(v),
            Self::Apr(m) => m.visit(v),
        }
    }

    /// The sender's communication ID (SIDR: the request ID; ClassPortInfo: 0).
    pub const fn local_comm_id(&self) -> u32 {
        match self {
            Self::ClassPortInfo(_) => 0,
            Self::Req(m) => m.local_comm_id,
            Self::Mra(m) => m.local_comm_id,
            Self::Rej(m) => m.local_comm_id,
            Self::Rep(m) => m.local_comm_id,
            Self::Rtu(m) => m.local_comm_id,
            Self::Dreq(m) => m.local_comm_id,
            Self::Drep(m) => m.local_comm_id,
            Self::SidrReq(m) => m.request_id,
            Self::SidrRep(m) => m.request_id,
            Self::Lap(m) => m.local_comm_id,
            Self::Apr(m) => m.local_comm_id,
        }
    }

    /// The receiver's communication ID, for the messages that carry one.
    pub const fn remote_comm_id(&self) -> Option<u32> {
        match self {
            Self::ClassPortInfo(_) | Self::Req(_) | Self::SidrReq(_) | Self::SidrRep(_) => None,
            Self::Mra(m) => Some(m.remote_comm_id),
            Self::Rej(m) => Some(m.remote_comm_id),
            Self::Rep(m) => Some(m.remote_comm_id),
            Self::Rtu(m) => Some(m.remote_comm_id),
            Self::Dreq(m) => Some(m.remote_comm_id),
            Self::Drep(m) => Some(m.remote_comm_id),
            Self::Lap(m) => Some(m.remote_comm_id),
            Self::Apr(m) => Some(m.remote_comm_id),
        }
    }
}

/// A CM message of any kind, as a zero-copy view: what printers and filters read, without
/// copying the private data ([`Message`] is the owned form that builders emit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageView<'a> {
    /// ClassPortInfo.
    ClassPortInfo(ClassPortInfoView<'a>),
    /// REQ.
    Req(ReqView<'a>),
    /// MRA.
    Mra(MraView<'a>),
    /// REJ.
    Rej(RejView<'a>),
    /// REP.
    Rep(RepView<'a>),
    /// RTU.
    Rtu(RtuView<'a>),
    /// DREQ.
    Dreq(DreqView<'a>),
    /// DREP.
    Drep(DrepView<'a>),
    /// SIDR_REQ.
    SidrReq(SidrReqView<'a>),
    /// SIDR_REP.
    SidrRep(SidrRepView<'a>),
    /// LAP.
    Lap(LapView<'a>),
    /// APR.
    Apr(AprView<'a>),
}

impl<'a> MessageView<'a> {
    /// Views the message an attribute ID names in the 232 bytes after the MAD common header;
    /// `None` for IDs the CM class does not define.
    pub fn parse(attribute_id: u16, data: &'a [u8]) -> Option<Result<Self>> {
        Some(match MessageKind::from_attribute(attribute_id)? {
            MessageKind::ClassPortInfo => ClassPortInfoView::new(data).map(Self::ClassPortInfo),
            MessageKind::Req => ReqView::new(data).map(Self::Req),
            MessageKind::Mra => MraView::new(data).map(Self::Mra),
            MessageKind::Rej => RejView::new(data).map(Self::Rej),
            MessageKind::Rep => RepView::new(data).map(Self::Rep),
            MessageKind::Rtu => RtuView::new(data).map(Self::Rtu),
            MessageKind::Dreq => DreqView::new(data).map(Self::Dreq),
            MessageKind::Drep => DrepView::new(data).map(Self::Drep),
            MessageKind::SidrReq => SidrReqView::new(data).map(Self::SidrReq),
            MessageKind::SidrRep => SidrRepView::new(data).map(Self::SidrRep),
            MessageKind::Lap => LapView::new(data).map(Self::Lap),
            MessageKind::Apr => AprView::new(data).map(Self::Apr),
        })
    }

    /// Its kind.
    pub const fn kind(&self) -> MessageKind {
        match self {
            Self::ClassPortInfo(_) => MessageKind::ClassPortInfo,
            Self::Req(_) => MessageKind::Req,
            Self::Mra(_) => MessageKind::Mra,
            Self::Rej(_) => MessageKind::Rej,
            Self::Rep(_) => MessageKind::Rep,
            Self::Rtu(_) => MessageKind::Rtu,
            Self::Dreq(_) => MessageKind::Dreq,
            Self::Drep(_) => MessageKind::Drep,
            Self::SidrReq(_) => MessageKind::SidrReq,
            Self::SidrRep(_) => MessageKind::SidrRep,
            Self::Lap(_) => MessageKind::Lap,
            Self::Apr(_) => MessageKind::Apr,
        }
    }

    /// Every field copied into the owned message.
    pub fn to_repr(&self) -> Message {
        match self {
            Self::ClassPortInfo(m) => Message::ClassPortInfo(m.to_repr()),
            Self::Req(m) => Message::Req(m.to_repr()),
            Self::Mra(m) => Message::Mra(m.to_repr()),
            Self::Rej(m) => Message::Rej(m.to_repr()),
            Self::Rep(m) => Message::Rep(m.to_repr()),
            Self::Rtu(m) => Message::Rtu(m.to_repr()),
            Self::Dreq(m) => Message::Dreq(m.to_repr()),
            Self::Drep(m) => Message::Drep(m.to_repr()),
            Self::SidrReq(m) => Message::SidrReq(m.to_repr()),
            Self::SidrRep(m) => Message::SidrRep(m.to_repr()),
            Self::Lap(m) => Message::Lap(m.to_repr()),
            Self::Apr(m) => Message::Apr(m.to_repr()),
        }
    }

    /// Every field by its IBTA name.
    pub fn visit(&self, v: &mut dyn FnMut(&'static str, Value<'_>)) {
        match self {
            Self::ClassPortInfo(m) => m.visit(v),
            Self::Req(m) => m.visit(v),
            Self::Mra(m) => m.visit(v),
            Self::Rej(m) => m.visit(v),
            Self::Rep(m) => m.visit(v),
            Self::Rtu(m) => m.visit(v),
            Self::Dreq(m) => m.visit(v),
            Self::Drep(m) => m.visit(v),
            Self::SidrReq(m) => m.visit(v),
            Self::SidrRep(m) => m.visit(v),
            Self::Lap(m) => m.visit(v),
            Self::Apr(m) => m.visit(v),
        }
    }

    /// The 232 bytes it reads.
    pub const fn bytes(&self) -> &'a [u8; DATA_LEN] {
        match self {
            Self::ClassPortInfo(m) => m.bytes(),
            Self::Req(m) => m.bytes(),
            Self::Mra(m) => m.bytes(),
            Self::Rej(m) => m.bytes(),
            Self::Rep(m) => m.bytes(),
            Self::Rtu(m) => m.bytes(),
            Self::Dreq(m) => m.bytes(),
            Self::Drep(m) => m.bytes(),
            Self::SidrReq(m) => m.bytes(),
            Self::SidrRep(m) => m.bytes(),
            Self::Lap(m) => m.bytes(),
            Self::Apr(m) => m.bytes(),
        }
    }

    /// The sender's communication ID (SIDR: the request ID; ClassPortInfo: 0). Every message
    /// but ClassPortInfo has it in its first word (§12.6).
    pub fn local_comm_id(&self) -> u32 {
        match self {
            Self::ClassPortInfo(_) => 0,
            _ => get_bits(self.bytes(), 0, 0, 32) as u32,
        }
    }

    /// The receiver's communication ID, for the messages that carry one (the second word).
    pub fn remote_comm_id(&self) -> Option<u32> {
        match self {
            Self::ClassPortInfo(_) | Self::Req(_) | Self::SidrReq(_) | Self::SidrRep(_) => None,
            _ => Some(get_bits(self.bytes(), 4, 0, 32) as u32),
        }
    }
}
