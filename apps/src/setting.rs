//! What the applications call each setting of a run ([`Setting`]), apart from why one is
//! refused (`config`), so that every application can name one without depending on the
//! others' errors.

/// A setting of a run, as the applications know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Setting {
    /// The path MTU.
    Mtu,
    /// The number of QPs.
    Qps,
    /// The queue depth of the workload (operations in flight per QP).
    Depth,
    /// The message size.
    Size,
    /// The largest message of a size range.
    LargestMessage,
    /// The largest UD message.
    LargestDatagram,
    /// The memory of every QP's buffers together.
    Buffers,
    /// The list of QP services, one per QP in turn.
    Transports,
    /// The operation mix.
    Ops,
    /// The local ACK timeout (IBTA Vol 1 9.7.6.1.3, an exponent).
    Timeout,
    /// The READs and atomics a QP may have outstanding at its peer.
    MaxRdAtomic,
    /// The number of iterations.
    Iterations,
    /// The duration of a timed test.
    Duration,
    /// The request size of the UDP exchange baseline.
    Request,
    /// The replies per request of the UDP exchange baseline.
    Replies,
    /// READs and atomics outstanding in a bandwidth test.
    Outs,
    /// The send queue depth of a bandwidth test.
    TxDepth,
    /// The QP service of a test.
    Service,
    /// How often each plan runs.
    Repeat,
    /// The number of hosts.
    Hosts,
    /// The offered load, a fraction of the host links.
    Load,
    /// The senders of an incast.
    IncastSenders,
    /// The size of each incast flow.
    IncastSize,
    /// Long flows per host.
    FlowsPerHost,
    /// The size of each long flow.
    ElephantSize,
    /// The victim flow of a head-of-line blocking experiment.
    Victim,
    /// The victim flow's size.
    VictimSize,
    /// The network's topology.
    Topology,
    /// The congestion control.
    Cc,
    /// The local address to bind.
    Bind,
    /// The shape of a KV cache: layers, tokens, bytes per token.
    Shape,
    /// Tokens per block of a KV pool.
    Page,
}

impl Setting {
    /// The setting in words, as this crate's messages name it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Mtu => "the path MTU",
            Self::Qps => "the number of QPs",
            Self::Depth => "the queue depth",
            Self::Size => "the message size",
            Self::LargestMessage => "the largest message",
            Self::LargestDatagram => "the largest UD message",
            Self::Buffers => "the buffers of every QP",
            Self::Transports => "the number of QP services listed",
            Self::Ops => "the operation mix",
            Self::Timeout => "the local ACK timeout",
            Self::MaxRdAtomic => "max_rd_atomic",
            Self::Iterations => "the number of iterations",
            Self::Duration => "the duration",
            Self::Request => "the request size",
            Self::Replies => "replies",
            Self::Outs => "the outstanding READs",
            Self::TxDepth => "the send queue depth",
            Self::Service => "the QP service",
            Self::Repeat => "the repeat count",
            Self::Hosts => "the number of hosts",
            Self::Load => "the load",
            Self::IncastSenders => "incast senders",
            Self::IncastSize => "incast size",
            Self::FlowsPerHost => "flows per host",
            Self::ElephantSize => "elephant size",
            Self::Victim => "the victim flow",
            Self::VictimSize => "victim size",
            Self::Topology => "the topology",
            Self::Cc => "the congestion control",
            Self::Bind => "the local address",
            Self::Shape => "the layers, tokens and bytes per token",
            Self::Page => "the page",
        }
    }
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}
