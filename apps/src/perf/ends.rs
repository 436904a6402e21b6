//! `roce perf`'s one entry: the connector's end(s) over roce's control channel, RDMA-CM, or
//! perftest's exchange (over TCP, or over RDMA-CM as perftest's `-R`).
use roce_driver::connect::{one_process, AfterGivingUp, Connector, Ends, Exchange, Listener};
use roce_driver::DriverError;

use super::perftest::{run_perftest_client, serve_perftest, PerftestOpts};
use super::run as roce;
use super::{cm, PerfResult, PerfSpec};

/// What a perf run does beyond its connector.
#[derive(Debug, Clone, Copy)]
pub struct PerfRun<'a> {
    /// The tests, in order (a sweep: one per size).
    pub specs: &'a [PerfSpec],
    /// Each test followed by its plain-UDP baselines (roce's control channel only).
    pub baseline: bool,
    /// How perftest's exchange reports, and where its peer's GID may point.
    pub perftest: PerftestOpts,
}

/// What a perf server did.
#[derive(Debug, Clone, PartialEq)]
pub enum Served {
    /// roce's own server: the runs its client asked for.
    Runs(u64),
    /// A perftest server: the figures it prints (the client's report; a SEND or latency
    /// test's own), one per size.
    Figures(Vec<PerfResult>),
}

/// Runs `roce perf` as the connector's end(s):
/// - a server serves a client (roce's, or over perftest's exchange a stock perftest
///   client): `Some(Served)`;
/// - a client, or both ends in one process, runs every test in turn and hands each result to
///   `out` as soon as it is measured (`out` returns `false` to stop there: its reader went
///   away): `None`.
pub fn run(
    mut c: Connector,
    r: PerfRun<'_>,
    mut out: impl FnMut(&PerfResult) -> bool,
) -> Result<Option<Served>, DriverError> {
    c.expect(
        "roce perf",
        &[
            Exchange::Control,
            Exchange::RdmaCm,
            Exchange::Perftest { cm: false },
            Exchange::Perftest { cm: true },
        ],
    )?;
    let (secrets, link, roce_port) = (c.secrets, c.link, c.roce_port);
    let ready = c.take_ready();
    let mut every = |rs: Vec<PerfResult>| {
        for x in &rs {
            if !out(x) {
                break;
            }
        }
    };
    match (c.exchange, c.ends) {
        (Exchange::Control, Ends::Server { listen, .. }) => {
            let l = Listener::at(listen, roce_port)?;
            ready();
            roce::serve(l, secrets, link).map(|n| Some(Served::Runs(n)))
        }
        (Exchange::Control, Ends::Client { server, bind }) => {
            let client = roce_driver::connect::ClientConfig {
                server,
                bind,
                roce_port,
            };
            roce::run_client(client, r.specs, r.baseline, secrets, link, out).map(|()| None)
        }
        (Exchange::Control, Ends::Both { client, server, .. }) => {
            roce::loopback(client, server, r.specs, r.baseline, secrets, link, out).map(|()| None)
        }
        (Exchange::RdmaCm, Ends::Server { listen, after }) => {
            cm::serve_cm(listen.ip(), listen.port(), secrets, link, after, ready)
                .map(|n| Some(Served::Runs(n)))
        }
        (Exchange::RdmaCm, Ends::Client { server, bind }) => {
            let local = roce_driver::connect::local_toward(server.ip(), bind)?;
            cm::run_client_cm(
                local,
                server.ip(),
                server.port(),
                r.specs,
                secrets,
                link,
                out,
            )
            .map(|()| None)
        }
        (Exchange::RdmaCm, Ends::Both { client, server, .. }) => {
            cm::loopback_cm(client, server, r.specs, secrets, link, out).map(|()| None)
        }
        (Exchange::Perftest { cm }, Ends::Server { listen, after }) => {
            let (ip, port) = (listen.ip(), listen.port());
            serve_perftest(
                ip, port, cm, r.specs, secrets, link, r.perftest, after, ready,
            )
            .map(|f| Some(Served::Figures(f)))
        }
        (Exchange::Perftest { cm }, Ends::Client { server, bind }) => {
            // RDMA-CM names this side's address in its REQs: the route's, unless given.
            let bind = match (bind, cm) {
                (None, true) => Some(roce_driver::connect::local_toward(server.ip(), None)?),
                (b, _) => b,
            };
            let rs = run_perftest_client(server, bind, cm, r.specs, secrets, link, r.perftest)?;
            every(rs);
            Ok(None)
        }
        (
            Exchange::Perftest { cm },
            Ends::Both {
                client,
                server,
                port,
            },
        ) => {
            let server_specs = r.specs.to_vec();
            let opts = r.perftest;
            let (rs, _) = one_process(
                "perftest-server",
                move |ready| {
                    serve_perftest(
                        server,
                        port,
                        cm,
                        &server_specs,
                        secrets,
                        link,
                        opts,
                        AfterGivingUp::Fail,
                        ready,
                    )
                },
                || {
                    let to = std::net::SocketAddr::new(server, port);
                    run_perftest_client(to, Some(client), cm, r.specs, secrets, link, opts)
                },
            )?;
            every(rs);
            Ok(None)
        }
        (e, _) => Err(roce_driver::Unsupported::Exchange {
            app: "roce perf",
            exchange: e,
        }
        .into()),
    }
}
