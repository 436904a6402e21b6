//! The one error type of the codec: small, `Copy`, and allocation-free.
use core::fmt;

/// The header (or part of a packet) an [`Error`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Layer {
    /// Ethernet II header.
    Ethernet,
    /// An IEEE 802.1Q / 802.1ad VLAN tag.
    Vlan,
    /// IPv4 header.
    Ipv4,
    /// IPv6 header.
    Ipv6,
    /// UDP header.
    Udp,
    /// InfiniBand Local Route Header (native IB only).
    Lrh,
    /// InfiniBand Global Route Header (RoCE v1, native IB).
    Grh,
    /// Base Transport Header.
    Bth,
    /// Reliable Datagram Extended Transport Header.
    Rdeth,
    /// Datagram Extended Transport Header.
    Deth,
    /// XRC Extended Transport Header.
    Xrceth,
    /// Flush Extended Transport Header.
    Feth,
    /// RDMA Extended Transport Header.
    Reth,
    /// Atomic Extended Transport Header.
    AtomicEth,
    /// ACK Extended Transport Header.
    Aeth,
    /// Atomic ACK Extended Transport Header.
    AtomicAckEth,
    /// Immediate data.
    ImmDt,
    /// Invalidate Extended Transport Header.
    Ieth,
    /// The payload after the transport headers.
    Payload,
    /// The pad bytes (BTH PadCnt) after the payload.
    Pad,
    /// The invariant CRC.
    Icrc,
    /// The caller's output buffer (when building).
    Buffer,
    /// A management datagram (MAD) carried on QP0 or QP1.
    Mad,
    /// A communication-management message inside a MAD.
    Cm,
    /// MRC Message Extended Transport Header (RQMSN, MSN).
    Meth,
    /// MRC Timestamp Extended Transport Header.
    Tseth,
    /// MRC Selective-ACK Extended Transport Header.
    Seth,
    /// MRC congestion-control state (after the SETH).
    CcState,
    /// MRC NACK Extended Transport Header.
    Neth,
    /// MRC Probe Extended Transport Header.
    Peth,
    /// MRC Endpoint Request Transport Header.
    Erth,
    /// MRC Endpoint rEsponse Transport Header.
    Eeth,
    /// UET entropy header (native IP).
    UetEntropy,
    /// UET security header (TSS).
    Tss,
    /// UET Packet Delivery Sub-layer header.
    Pds,
    /// UET Semantic Sub-layer header.
    Ses,
}

impl Layer {
    /// Short lower-case name, as used in error messages and JSON output.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Ethernet => "ethernet",
            Self::Vlan => "vlan",
            Self::Ipv4 => "ipv4",
            Self::Ipv6 => "ipv6",
            Self::Udp => "udp",
            Self::Lrh => "lrh",
            Self::Grh => "grh",
            Self::Bth => "bth",
            Self::Rdeth => "rdeth",
            Self::Deth => "deth",
            Self::Xrceth => "xrceth",
            Self::Feth => "feth",
            Self::Reth => "reth",
            Self::AtomicEth => "atomiceth",
            Self::Aeth => "aeth",
            Self::AtomicAckEth => "atomicacketh",
            Self::ImmDt => "immdt",
            Self::Ieth => "ieth",
            Self::Payload => "payload",
            Self::Pad => "pad",
            Self::Icrc => "icrc",
            Self::Buffer => "buffer",
            Self::Mad => "mad",
            Self::Cm => "cm",
            Self::Meth => "mrc.meth",
            Self::Tseth => "mrc.tseth",
            Self::Seth => "mrc.seth",
            Self::CcState => "mrc.cc_state",
            Self::Neth => "mrc.neth",
            Self::Peth => "mrc.peth",
            Self::Erth => "mrc.erth",
            Self::Eeth => "mrc.eeth",
            Self::UetEntropy => "uet.entropy",
            Self::Tss => "uet.tss",
            Self::Pds => "uet.pds",
            Self::Ses => "uet.ses",
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why bytes could not be parsed (or a packet could not be built).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// The bytes end before the header (or the length a field claims) does.
    Truncated {
        /// The header that was cut.
        layer: Layer,
        /// Bytes that header needs from where it starts.
        needed: usize,
        /// Bytes that were there.
        got: usize,
    },
    /// Long enough, but a field holds a value the layer forbids.
    Malformed {
        /// The header holding the value.
        layer: Layer,
        /// What is wrong, in a few words.
        reason: &'static str,
    },
    /// A well-formed frame that does not carry RoCE (another EtherType, protocol or port).
    NotRoce {
        /// What the frame is instead.
        reason: &'static str,
    },
}

impl Error {
    /// The layer the error is about (`None` for [`Error::NotRoce`]).
    pub const fn layer(&self) -> Option<Layer> {
        match self {
            Self::Truncated { layer, .. } | Self::Malformed { layer, .. } => Some(*layer),
            Self::NotRoce { .. } => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { layer, needed, got } => {
                write!(f, "{layer}: truncated, needs {needed} bytes, got {got}")
            }
            Self::Malformed { layer, reason } => write!(f, "{layer}: {reason}"),
            Self::NotRoce { reason } => write!(f, "not RoCE: {reason}"),
        }
    }
}

impl core::error::Error for Error {}

/// `Result` with the codec's [`Error`].
pub type Result<T> = core::result::Result<T, Error>;

/// Returns `Err(Truncated)` unless `buf` holds at least `needed` bytes.
#[inline]
pub(crate) const fn need(layer: Layer, buf: &[u8], needed: usize) -> Result<()> {
    if buf.len() < needed {
        Err(Error::Truncated {
            layer,
            needed,
            got: buf.len(),
        })
    } else {
        Ok(())
    }
}
