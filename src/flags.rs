//! Errors as the command line words them: the libraries name a refused setting by what it is
//! ([`Setting`]); here it gets the flag of the command that was run. The one place flag names
//! meet error messages.

use roce_apps::kv::KvError;
use roce_apps::{Combination, ConfigError, Setting};
use roce_driver::DriverError;

/// The flag of `command` that sets `s` (its words where no flag sets it).
fn flag(command: &str, s: Setting) -> &'static str {
    use Setting as S;
    match s {
        S::Mtu => "--mtu",
        S::Qps => "--qps",
        S::Depth => "--depth",
        S::Size if command == "perf" => "-s",
        S::Size => "--size",
        S::LargestMessage => "the largest message (--size)",
        S::LargestDatagram => "the largest UD message",
        S::Buffers => "the buffers of --qps x --size",
        S::Transports => "the number of --transport entries",
        S::Ops => "--ops",
        S::Timeout => "--timeout",
        S::Iterations => "-n",
        S::Duration => "--duration",
        S::Request => "--request",
        S::Outs => "--outs",
        S::TxDepth => "--tx-depth",
        S::Service => "-c",
        S::Repeat => "--repeat",
        S::Hosts => "--hosts",
        S::Load => "--load",
        S::Victim => "--victim",
        S::Topology => "--topology",
        S::Cc => "--cc",
        S::Bind => "--bind",
        S::Shape => "--layers, --tokens and --kv-bytes",
        S::Page => "--page",
        other => other.describe(),
    }
}

/// A refused combination, in the command line's words.
fn combination(command: &str, c: Combination) -> String {
    use Combination as C;
    match c {
        C::NothingCarried(svc) => format!(
            "--transport {}: the --ops mix has nothing {svc} carries ({})",
            svc.token(),
            if svc == roce_stack::Service::Uc {
                "send, send_imm, write, write_imm"
            } else {
                "send, send_imm"
            }
        ),
        C::RequestNotUdp => "--request is for the udp bandwidth test only".into(),
        C::NoDuration => "--duration must be positive".into(),
        C::UcTest => "-c UC runs send and write only (UC has no READ or atomics)".into(),
        C::UdTest => "-c UD runs send only (UD has no RDMA operations)".into(),
        C::LoadOutOfRange => "--load must be between 0 and 1".into(),
        C::ElephantNeedsFabric => "the elephant workload needs a multi-switch --topology".into(),
        C::VictimNeedsSwitch => "--victim is an experiment of --topology switch".into(),
        C::HpccNeedsFabric => "--cc hpcc needs a fabric (--topology leaf-spine or fat-tree): \
                               the one-switch model stamps no INT"
            .into(),
        C::CmNeedsBind => "--cm needs the local address the server is reached from (--bind)".into(),
        C::CmNeedsTwoAddresses if command == "loopback" || command == "kv" => {
            "--cm runs both ends on UDP 4791: give them two addresses (--client-ip, --server-ip)"
                .into()
        }
        C::CmNeedsTwoAddresses => "--cm runs both ends on UDP 4791: give them two addresses".into(),
        C::BaselineNeedsTcp => {
            "the UDP baseline needs the TCP control connection (drop --cm)".into()
        }
        C::PerftestCmServerNeedsBind => {
            "--perftest --cm --server: give --bind, the address the client reaches".into()
        }
        C::PerftestCmClientNeedsBind => {
            "--perftest --cm --client: give --bind, this side's address".into()
        }
        other => other.to_string(),
    }
}

/// `e` with flags for the settings it names, or `None` when it names none.
fn config(command: &str, e: &ConfigError) -> Option<String> {
    Some(match e {
        ConfigError::OutOfRange {
            setting,
            range,
            value,
        } => format!("{} must be {range}, not {value}", flag(command, *setting)),
        ConfigError::TooBig {
            what,
            need_mib,
            limit_mib,
        } => format!(
            "{} need {need_mib} MiB, more than the {limit_mib} MiB allowed",
            flag(command, *what)
        ),
        ConfigError::Combination(c) => combination(command, *c),
        ConfigError::Kv(k) => kv(command, k)?,
        _ => return None,
    })
}

fn kv(command: &str, e: &KvError) -> Option<String> {
    Some(match e {
        KvError::OutOfRange {
            setting,
            range,
            value,
        } => format!("{} must be {range}, not {value}", flag(command, *setting)),
        KvError::EmptyShape => "--layers, --tokens and --kv-bytes must be at least 1".into(),
        _ => return None,
    })
}

/// One error of a chain in the command line's words, where it names a setting.
fn worded(command: &str, e: &(dyn std::error::Error + 'static)) -> Option<String> {
    if let Some(c) = e.downcast_ref::<ConfigError>() {
        return config(command, c);
    }
    if let Some(c) = e.downcast_ref::<Combination>() {
        return Some(combination(command, *c));
    }
    if let Some(k) = e.downcast_ref::<KvError>() {
        return kv(command, k);
    }
    if let Some(DriverError::Invalid(inner)) = e.downcast_ref::<DriverError>() {
        return worded(command, inner.as_ref());
    }
    None
}

/// The one line `roce COMMAND` prints for `e`: its chain as `a: b: c`, each setting named by
/// the command's flag.
pub(crate) fn message(command: &str, e: &anyhow::Error) -> String {
    let mut parts = Vec::new();
    for cause in e.chain() {
        if let Some(w) = worded(command, cause) {
            // The worded error says all its sources say.
            parts.push(w);
            break;
        }
        let text = cause.to_string();
        // An error whose message already ends with its source's says it once.
        if parts.last().is_some_and(|p: &String| p.ends_with(&text)) {
            continue;
        }
        parts.push(text);
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::message;
    use roce_apps::{Combination, ConfigError};
    use roce_driver::DriverError;

    #[test]
    fn settings_get_the_commands_flags() {
        let e = ConfigError::check_mtu(1000).unwrap_err();
        let lib = e.to_string();
        let through_driver = anyhow::Error::from(DriverError::from(e.clone()));
        assert_eq!(
            message("loopback", &through_driver),
            "--mtu must be 256, 512, 1024, 2048 or 4096, not 1000"
        );
        assert!(!lib.contains("--"), "{lib}");
        let e = anyhow::Error::from(
            ConfigError::check_range(roce_apps::Setting::Size, "1..=8388608 bytes", 0, 1, 8 << 20)
                .unwrap_err(),
        );
        assert_eq!(message("perf", &e), "-s must be 1..=8388608 bytes, not 0");
        assert_eq!(
            message("loopback", &e),
            "--size must be 1..=8388608 bytes, not 0"
        );
        let e = anyhow::Error::from(ConfigError::from(Combination::UdTest)).context("perf run");
        assert_eq!(
            message("perf", &e),
            "perf run: -c UD runs send only (UD has no RDMA operations)"
        );
        let e = anyhow::anyhow!("plain").context("outer");
        assert_eq!(message("perf", &e), "outer: plain");
        // A message that already carries its source's text does not repeat it.
        let post = roce_driver::AppError::post(0, "a SEND", roce_stack::PostError::QueueFull);
        let source = roce_stack::PostError::QueueFull.to_string();
        let e = anyhow::Error::from(post).context("kv");
        let m = message("kv", &e);
        assert_eq!(m.matches(&source).count(), 1, "{m}");
    }
}
