//! The AI fabrics' transports next to RoCEv2: MRC (RoCEv2 with manufacturer-range opcodes,
//! on UDP 4971, or on 4791 when the user says so) and UET (its own PDS and SES headers on
//! UDP 4793, or IP protocol 253). [`classify`] finds them in a captured frame; each packet's
//! fields are walked once (`walk`) into whichever output is asked for: the JSON object
//! (flat keys, Wireshark 5.0's `uet.*` names where it has them, `mrc.*` otherwise), the
//! verbose tree, and the summary line (a selection of the same values).
pub(crate) mod out;
mod packet;
pub(crate) mod walk;

pub use out::{json, summary, verbose};
pub use packet::{classify, mrc_on_its_port, Ends, FabricOptions, Packet, Transport};
