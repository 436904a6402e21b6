//! `roce kv`: the KV-cache push of prefill/decode disaggregation, plan by plan.
use std::process::ExitCode;

use clap::Args;
use roce_apps::kv::run::{KvConfig, KvServerConfig, DEFAULT_MAX_POOL};
use roce_apps::kv::{self, AllocKind, KvLayout, KvSpec, ModelShape, PlanSpec};
use roce_driver::connect::{self, Connector, Exchange, Ran};
use roce_driver::Secrets;
use roce_stack::ConnectParams;

use crate::args::{size_flag, Ends, ImpairArgs, LinkArgs};
use crate::output::report;

#[derive(Debug, Args)]
pub(crate) struct KvArgs {
    /// Transformer layers.
    #[arg(long, default_value_t = 8)]
    layers: u32,
    /// Prompt tokens.
    #[arg(long, default_value_t = 4096)]
    tokens: u32,
    /// Bytes of K per token per layer (V is the same).
    #[arg(long, default_value_t = 256)]
    kv_bytes: u32,
    /// Tokens per block (one plan instead of the five default plans).
    #[arg(long)]
    page: Option<u32>,
    /// K and V of a page: separate or adjacent (one plan).
    #[arg(long)]
    layout: Option<String>,
    /// Merge runs contiguous at both ends into one WRITE (one plan).
    #[arg(long)]
    merge: bool,
    /// Block allocation at the decode side: contiguous or scattered (a busy pool).
    #[arg(long, default_value = "scattered")]
    alloc: String,
    /// Size of the decode side's pool (K = 1024; default 3x the request's KV).
    #[arg(long)]
    pool: Option<String>,
    /// Queue pairs the WRITEs are spread over.
    #[arg(long, default_value_t = 1)]
    qps: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(long, default_value_t = 4096)]
    mtu: u32,
    /// Seed of the allocation, the data, the impairments and the secrets (start PSNs, QPNs,
    /// keys), for a reproducible run. Without it the run uses seed 1 and the secrets come
    /// from the OS random generator.
    #[arg(long)]
    seed: Option<u64>,
    /// Server: the largest pool a client may ask for (K = 1024).
    #[arg(long, default_value = "1G")]
    max_pool: String,
    #[command(flatten)]
    impair: ImpairArgs,
    #[command(flatten)]
    link: LinkArgs,
    /// Local ACK timeout code: 4.096 us x 2^N (14 = 67 ms).
    #[arg(long, default_value_t = 14)]
    timeout: u8,
    /// Run every plan N times and report the fastest run of each.
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Connect the QPs through the IB CM on QP1 (UDP 4791; --port is then the RDMA-CM port)
    /// instead of the TCP control connection; the kv messages go over one more RC QP.
    #[arg(long)]
    cm: bool,
    #[command(flatten)]
    ends: Ends,
}

fn parse_layout(s: &str) -> anyhow::Result<KvLayout> {
    match s {
        "separate" => Ok(KvLayout::Separate),
        "adjacent" => Ok(KvLayout::Adjacent),
        _ => anyhow::bail!("--layout {s:?}: use separate or adjacent"),
    }
}

fn parse_alloc(s: &str) -> anyhow::Result<AllocKind> {
    match s {
        "contiguous" => Ok(AllocKind::Contiguous),
        "scattered" => Ok(AllocKind::Scattered),
        _ => anyhow::bail!("--alloc {s:?}: use contiguous or scattered"),
    }
}

pub(crate) fn run(a: KvArgs) -> anyhow::Result<ExitCode> {
    let seed = a.seed.unwrap_or(1);
    let imp = a.impair.impairment(seed)?;
    let secrets = Secrets::from_seed(a.seed);
    let max_pool = size_flag("--max-pool", Some(&a.max_pool))?.unwrap_or(DEFAULT_MAX_POOL);
    let server = KvServerConfig {
        impairment: imp,
        secrets,
        max_pool,
        link: a.link.link,
    };
    let exchange = if a.cm {
        Exchange::RdmaCm
    } else {
        Exchange::Control
    };
    if a.ends.server {
        let ends = a.ends.connect(false)?;
        let cm = a.cm;
        let c = Connector::new(exchange, ends, secrets, a.link.link).on_ready(move || {
            if let connect::Ends::Server { listen, .. } = ends {
                if cm {
                    eprintln!(
                        "roce kv: decode side waiting for a prefill client's CM REQ on {} UDP 4791 (RDMA-CM port {})",
                        listen.ip(),
                        listen.port()
                    );
                } else {
                    eprintln!("roce kv: decode side waiting for a prefill client on {listen}");
                }
            }
        });
        let Ran::Served(o) = kv::run(c, &KvConfig::default(), server)? else {
            unreachable!("a server serves")
        };
        return Ok(served(&o));
    }
    let shape = ModelShape {
        layers: a.layers,
        tokens: a.tokens,
        kv_bytes: a.kv_bytes,
    };
    shape.validate()?;
    let alloc = parse_alloc(&a.alloc)?;
    let plans = if a.page.is_some() || a.layout.is_some() || a.merge {
        let layout = match &a.layout {
            Some(l) => parse_layout(l)?,
            None => KvLayout::Separate,
        };
        vec![PlanSpec::kv(a.page.unwrap_or(16), layout, a.merge, alloc)]
    } else {
        PlanSpec::defaults(alloc)
    };
    let pool_bytes = size_flag("--pool", a.pool.as_deref())?.unwrap_or(3 * shape.total_bytes());
    let cfg = KvConfig {
        spec: KvSpec {
            shape,
            pool_bytes,
            qps: a.qps,
            seed,
        },
        plans,
        transport: ConnectParams {
            mtu: a.mtu,
            timeout: a.timeout,
            ..ConnectParams::default()
        },
        impairment: imp,
        repeat: a.repeat,
        secrets,
        link: a.link.link,
        ..KvConfig::default()
    };
    cfg.validate()?;
    let mut ends = a.ends.connect(true)?;
    if let (connect::Ends::Client { server, .. }, Some(host), true) =
        (&mut ends, &a.ends.client, a.cm)
    {
        // HOST without a port: the RDMA-CM port given with --port.
        if !host.contains(':') || host.ends_with(']') {
            server.set_port(a.ends.port);
        }
    }
    let c = Connector::new(exchange, ends, secrets, a.link.link);
    let r = match kv::run(c, &cfg, server)? {
        Ran::Client(r) | Ran::Both { client: r, .. } => r,
        Ran::Served(_) => unreachable!("a client ran"),
    };
    report(&r, r.ok, a.json)
}

/// What a decode server says when its client is done; its exit code.
fn served(o: &kv::run::KvServerOutcome) -> ExitCode {
    for m in &o.mismatches {
        eprintln!("roce kv: {m}");
    }
    eprintln!("roce kv: {} of {} plans verified here", o.verified, o.plans);
    if o.verified == o.plans {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
