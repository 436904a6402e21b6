//! `roce kv`'s one entry: the connector's end(s) over roce's control channel or RDMA-CM.
use roce_driver::connect::{Connector, Ends, Exchange, Listener, Ran};
use roce_driver::DriverError;

use super::cm;
use super::run::{self as roce, KvConfig, KvReport, KvServerConfig, KvServerOutcome};

/// Runs the KV-cache push as the connector's end(s): a decode server serves one prefill
/// client (`server`'s settings; the client sends the spec and plans) and counts the plans it
/// verified; a prefill client, or both ends in one process, pushes every plan of `cfg` and
/// reports (both ends' view).
pub fn run(
    mut c: Connector,
    cfg: &KvConfig,
    server: KvServerConfig,
) -> Result<Ran<KvServerOutcome, KvReport>, DriverError> {
    c.expect("roce kv", &[Exchange::Control, Exchange::RdmaCm])?;
    let ready = c.take_ready();
    let cm = c.exchange == Exchange::RdmaCm;
    match (cm, c.ends) {
        (false, Ends::Server { listen, .. }) => {
            let l = Listener::at(listen, c.roce_port)?;
            ready();
            roce::serve(l, server).map(Ran::Served)
        }
        (true, Ends::Server { listen, after }) => {
            cm::serve_cm(listen.ip(), listen.port(), server, after, ready).map(Ran::Served)
        }
        (false, Ends::Client { server, bind }) => {
            let to = roce_driver::connect::ClientConfig {
                server,
                bind,
                roce_port: c.roce_port,
            };
            roce::run_client(to, cfg).map(Ran::Client)
        }
        (true, Ends::Client { server, bind }) => {
            let local = roce_driver::connect::local_toward(server.ip(), bind)?;
            cm::run_client_cm(local, server.ip(), server.port(), cfg).map(Ran::Client)
        }
        (false, Ends::Both { client, server, .. }) => {
            roce::loopback(client, server, cfg).map(Ran::Client)
        }
        (true, Ends::Both { client, server, .. }) => {
            cm::loopback_cm(client, server, cfg).map(Ran::Client)
        }
    }
}
