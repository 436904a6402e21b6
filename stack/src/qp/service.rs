//! The transport service of a QP (IBTA Vol 1 §9.8, transport services): what every layer above the
//! core (the connection layer, the applications, the command line) names a kind of QP by.
//!
//! | service | connection | acknowledged | operations |
//! |---|---|---|---|
//! | RC | one peer QP | yes: go-back-N, RNR | SEND, WRITE, READ, atomics, and the rest |
//! | UC | one peer QP | no: a message cut by a loss is dropped whole | SEND, WRITE |
//! | UD | none: an address handle per message | no | SEND of at most one MTU |
//!
//! The GSI (QP1, §13.5.1) is a UD QP with the well-known Q_Key; the device keeps it apart
//! ([`crate::gsi`]) because it carries management datagrams, not application data.
use core::fmt;
use core::str::FromStr;

/// A QP's transport service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum Service {
    /// Reliable Connection (§9.7).
    #[default]
    Rc,
    /// Unreliable Connection.
    Uc,
    /// Unreliable Datagram (§10.2.4 for its Q_Keys).
    Ud,
}

impl Service {
    /// Every service, in the order reports list them.
    pub const ALL: [Self; 3] = [Self::Rc, Self::Uc, Self::Ud];

    /// The name the specification and perftest print: `RC`, `UC`, `UD`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Rc => "RC",
            Self::Uc => "UC",
            Self::Ud => "UD",
        }
    }

    /// The lowercase token of JSON documents and command lines: `rc`, `uc`, `ud`.
    pub const fn token(self) -> &'static str {
        match self {
            Self::Rc => "rc",
            Self::Uc => "uc",
            Self::Ud => "ud",
        }
    }

    /// Acknowledged and retransmitted: nothing is lost without an error (RC only).
    pub const fn reliable(self) -> bool {
        matches!(self, Self::Rc)
    }

    /// A message can be lost without an error (UC, UD): what the receiver never got is
    /// gone, not retransmitted.
    pub const fn lossy(self) -> bool {
        !self.reliable()
    }

    /// Connected to one peer QP (RC, UC), rather than addressed per message (UD).
    pub const fn connected(self) -> bool {
        !matches!(self, Self::Ud)
    }

    /// Carries RDMA WRITE (RC, UC).
    pub const fn writes(self) -> bool {
        self.connected()
    }

    /// Carries RDMA READ, atomics and the other responder-executed requests (RC only).
    pub const fn reads(self) -> bool {
        self.reliable()
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A service name that is not `RC`, `UC` or `UD`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown transport service `{0}` (expected RC, UC or UD)")]
pub struct UnknownService(pub String);

impl FromStr for Service {
    type Err = UnknownService;

    /// `RC`, `UC` or `UD`, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownService(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_in_any_case() {
        for s in Service::ALL {
            assert_eq!(s.name().parse::<Service>(), Ok(s));
            assert_eq!(s.token().parse::<Service>(), Ok(s));
        }
        assert!("RD".parse::<Service>().is_err());
        assert!("".parse::<Service>().is_err());
    }

    #[test]
    fn operations_by_service() {
        assert!(Service::Rc.reads() && Service::Rc.writes());
        assert!(!Service::Uc.reads() && Service::Uc.writes());
        assert!(!Service::Ud.reads() && !Service::Ud.writes());
        assert_eq!(
            Service::ALL.map(Service::reliable),
            [true, false, false],
            "only RC is reliable"
        );
    }
}
