//! The workload's one entry: the connector's end(s) over roce's control channel or RDMA-CM.
use roce_driver::connect::{Connector, Ends, Exchange, Listener, Ran};
use roce_driver::impair::Impairment;
use roce_driver::{DriverError, Taps};

use super::run::{RunConfig, ServerOutcome};
use super::{cm, run as roce, Report};

/// What a workload run does beyond its connector.
#[derive(Debug)]
pub struct WorkloadRun<'a> {
    /// The workload a client (or both ends in one process) runs; a server takes its client's.
    pub cfg: &'a RunConfig,
    /// What a server's end receives through (a client's or one process's is `cfg`'s).
    pub impairment: Impairment,
    /// Capture taps: the client's and the server's ends.
    pub taps: Taps,
}

/// Runs the verified workload as the connector's end(s): a server serves one client (the
/// client sends every setting) and reports what it verified; a client, or both ends in one
/// process, runs `cfg` and reports both ends. Over RDMA-CM the QPs are RC.
pub fn run(
    mut c: Connector,
    w: WorkloadRun<'_>,
) -> Result<Ran<ServerOutcome, Report>, DriverError> {
    c.expect("the workload", &[Exchange::Control, Exchange::RdmaCm])?;
    let (secrets, link, roce_port) = (c.secrets, c.link, c.roce_port);
    let ready = c.take_ready();
    let (cm, ends) = (c.exchange == Exchange::RdmaCm, c.ends);
    if cm && !matches!(ends, Ends::Server { .. }) && w.cfg.spec.any_lossy() {
        return Err(crate::Combination::LossyOverCm.into());
    }
    match (cm, ends) {
        (false, Ends::Server { listen, .. }) => {
            let l = Listener::at(listen, roce_port)?;
            ready();
            roce::serve(l, w.impairment, secrets, link, w.taps.server).map(Ran::Served)
        }
        (true, Ends::Server { listen, after }) => {
            let (ip, port) = (listen.ip(), listen.port());
            let tap = w.taps.server;
            cm::serve_cm(ip, port, w.impairment, secrets, link, tap, after, ready).map(Ran::Served)
        }
        (false, Ends::Client { server, bind }) => {
            let to = roce_driver::connect::ClientConfig {
                server,
                bind,
                roce_port,
            };
            roce::run_client(to, w.cfg, w.taps.client).map(Ran::Client)
        }
        (true, Ends::Client { server, bind }) => {
            let local = roce_driver::connect::local_toward(server.ip(), bind)?;
            cm::run_client_cm(local, server.ip(), server.port(), w.cfg, w.taps.client)
                .map(Ran::Client)
        }
        (false, Ends::Both { client, server, .. }) => {
            let (cp, sp) = c.roce_ports(client, server);
            let (c, s) = ((client, cp), (server, sp));
            roce::loopback_between(w.cfg, c, s, w.taps).map(Ran::Client)
        }
        (true, Ends::Both { client, server, .. }) => {
            cm::loopback_cm(w.cfg, client, server, w.taps).map(Ran::Client)
        }
    }
}
