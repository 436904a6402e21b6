//! `--cc`: the congestion control of a QP written as `name[:key=value,...]`.
//!
//! | name | controller |
//! |---|---|
//! | `none` | no pacing, CNPs ignored |
//! | `fixed:rate=R` | a fixed pacing rate (keys `rate`, `burst`) |
//! | `dcqcn`, `paper` | DCQCN with the paper's parameters |
//! | `nvidia` | DCQCN with NVIDIA's firmware defaults |
//! | `hpcc` | HPCC with the paper's parameters (needs INT: `roce sim fabric` on a fabric) |
//!
//! HPCC keys: `eta` (target utilisation), `max_stage`, `wai` (additive increase, bytes),
//! `t` (base RTT), `min_rate`.
//!
//! DCQCN keys (aliases in brackets): `g` (`alpha_gain`), `k` (`alpha_period`), `alpha_mode`
//! (`on-cut` or `periodic`), `alpha0` (`initial_alpha`), `reduce_period`
//! (`rate_reduce_period`), `t` (`timer`), `b` (`byte_counter`), `f` (`fast_recovery`),
//! `ai` (`rai`), `hai` (`rhai`), `min_rate` (`rmin`), `max_cut`, `clamp`
//! (`clamp_tgt_rate`), `first_cnp_rate` (`off` to disable), `halve_in_hyper`, `burst`.
//! Values are read by [`crate::units`]: rates `40Mbps`, `2.5G`; durations `55us`, `1.5ms`;
//! byte counts `300000`, `64K` (65,536), `300KB` (300,000); fractions `0.5`, `1/256`;
//! booleans. Names and keys are case-insensitive, `-` and `_` interchangeable.
//!
//! `CcConfig`'s `Display` prints the fully explicit form, which [`parse`] reads back to the
//! same value.
use roce_stack::cc::dcqcn::{AlphaMode, DcqcnParams};
use roce_stack::cc::hpcc::HpccParams;
use roce_stack::cc::pacing::DEFAULT_BURST_BYTES;
use roce_stack::CcConfig;

use crate::units::{self, UnitError};

/// Why a congestion-control configuration string (or parameter set) was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum CcConfigError {
    /// The name before `:` is not a known controller or preset.
    #[error(
        "unknown congestion control `{name}` (expected one of: none, fixed, dcqcn, paper, \
         nvidia, hpcc; optionally followed by `:key=value,...`)"
    )]
    UnknownPreset {
        /// The name given.
        name: String,
    },
    /// Parameters were given to a controller that has none.
    #[error("`{preset}` takes no parameters")]
    NoParameters {
        /// The controller.
        preset: &'static str,
    },
    /// A parameter name the controller does not know.
    #[error("unknown {preset} parameter `{key}` (expected one of: {expected})")]
    UnknownKey {
        /// The controller.
        preset: &'static str,
        /// The key given.
        key: String,
        /// The keys it knows.
        expected: &'static str,
    },
    /// A list item without `=`.
    #[error("`{item}` is not of the form key=value")]
    NotKeyValue {
        /// The item given.
        item: String,
    },
    /// The same parameter (or two aliases of it) given twice.
    #[error("parameter `{key}` given twice")]
    Duplicate {
        /// The canonical parameter name.
        key: &'static str,
    },
    /// A value that does not parse or is out of range for its parameter.
    #[error("bad value `{value}` for `{key}`: {reason}")]
    BadValue {
        /// The canonical parameter name.
        key: &'static str,
        /// The value given.
        value: String,
        /// What was expected.
        reason: &'static str,
    },
    /// `fixed` without a rate.
    #[error("`fixed` needs a rate, e.g. `fixed:rate=10Gbps`")]
    MissingRate,
    /// The parameters parse but do not make sense together ([`DcqcnParams::validate`]).
    #[error("invalid DCQCN parameters: {reason}")]
    InvalidParams {
        /// What is wrong.
        reason: &'static str,
    },
    /// HPCC where no switch stamps telemetry.
    #[error(
        "hpcc needs in-network telemetry, which only `roce sim fabric` on a leaf-spine or fat \
         tree stamps"
    )]
    NeedsInt,
    /// HPCC parameters that do not make sense ([`HpccParams::validate`]).
    #[error("invalid HPCC parameters: {reason}")]
    InvalidHpcc {
        /// What is wrong.
        reason: &'static str,
    },
}

/// [`parse`] for a QP on a real link or a plain simulated one: every controller but HPCC,
/// whose input (in-network telemetry) only the simulator's fabric stamps.
pub(crate) fn parse_no_int(s: &str) -> Result<CcConfig, CcConfigError> {
    match parse(s)? {
        CcConfig::Hpcc(_) => Err(CcConfigError::NeedsInt),
        c => Ok(c),
    }
}

/// Parses `name` or `name:key=value,...` (see the module docs).
pub(crate) fn parse(s: &str) -> Result<CcConfig, CcConfigError> {
    let (name, rest) = match s.split_once(':') {
        Some((n, r)) => (n, Some(r)),
        None => (s, None),
    };
    let mut cfg = match name.trim().to_ascii_lowercase().as_str() {
        "none" => CcConfig::None,
        "fixed" => CcConfig::Fixed {
            rate_bps: 0,
            burst_bytes: DEFAULT_BURST_BYTES,
        },
        "dcqcn" | "paper" => CcConfig::PAPER,
        "nvidia" => CcConfig::NVIDIA,
        "hpcc" => CcConfig::Hpcc(HpccParams::paper()),
        _ => {
            return Err(CcConfigError::UnknownPreset {
                name: name.trim().to_string(),
            })
        }
    };
    let mut seen: Vec<&'static str> = Vec::new();
    for item in rest.unwrap_or("").split(',') {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let Some((key, value)) = item.split_once('=') else {
            return Err(CcConfigError::NotKeyValue {
                item: item.to_string(),
            });
        };
        let canonical = set(&mut cfg, key.trim(), value.trim())?;
        if seen.contains(&canonical) {
            return Err(CcConfigError::Duplicate { key: canonical });
        }
        seen.push(canonical);
    }
    match cfg {
        CcConfig::Fixed { rate_bps: 0, .. } => Err(CcConfigError::MissingRate),
        CcConfig::Dcqcn(p) => p
            .validate()
            .map(|()| cfg)
            .map_err(|e| CcConfigError::InvalidParams { reason: e.reason }),
        CcConfig::Hpcc(p) => p
            .validate()
            .map(|()| cfg)
            .map_err(|reason| CcConfigError::InvalidHpcc { reason }),
        _ => Ok(cfg),
    }
}

/// Sets one parameter; returns its canonical name.
fn set(cfg: &mut CcConfig, key: &str, value: &str) -> Result<&'static str, CcConfigError> {
    let key = key.to_ascii_lowercase().replace('-', "_");
    let bad = |k: &'static str, reason: &'static str| CcConfigError::BadValue {
        key: k,
        value: value.to_string(),
        reason,
    };
    match cfg {
        CcConfig::None => Err(CcConfigError::NoParameters { preset: "none" }),
        CcConfig::Fixed {
            rate_bps,
            burst_bytes,
        } => match key.as_str() {
            "rate" => {
                *rate_bps = units::rate(value).map_err(|r| bad("rate", reason(r)))?;
                Ok("rate")
            }
            "burst" => {
                *burst_bytes = units::size(value).map_err(|r| bad("burst", reason(r)))?;
                Ok("burst")
            }
            _ => Err(CcConfigError::UnknownKey {
                preset: "fixed",
                key,
                expected: "rate, burst",
            }),
        },
        CcConfig::Dcqcn(p) => set_dcqcn(p, &key, value).map_err(|e| match e {
            SetError::Unknown => CcConfigError::UnknownKey {
                preset: "dcqcn",
                key: key.clone(),
                expected: DCQCN_KEYS,
            },
            SetError::Bad(k, reason) => bad(k, reason),
        }),
        CcConfig::Hpcc(p) => {
            let with =
                |k: &'static str, r: Result<f64, UnitError>| r.map_err(|e| bad(k, reason(e)));
            match key.as_str() {
                "eta" => {
                    p.eta = with("eta", units::fraction(value))?;
                    Ok("eta")
                }
                "max_stage" => {
                    p.max_stage = value
                        .parse()
                        .map_err(|_| bad("max_stage", "a whole number"))?;
                    Ok("max_stage")
                }
                "wai" | "w_ai" => {
                    p.w_ai_bytes = units::size(value).map_err(|e| bad("wai", reason(e)))? as f64;
                    Ok("wai")
                }
                "t" | "base_rtt" => {
                    p.base_rtt = units::duration(value).map_err(|e| bad("t", reason(e)))?;
                    Ok("t")
                }
                "min_rate" => {
                    p.min_rate_bps = units::rate(value).map_err(|e| bad("min_rate", reason(e)))?;
                    Ok("min_rate")
                }
                _ => Err(CcConfigError::UnknownKey {
                    preset: "hpcc",
                    key,
                    expected: "eta, max_stage, wai, t, min_rate",
                }),
            }
        }
    }
}

const DCQCN_KEYS: &str = "g, k, alpha_mode, alpha0, reduce_period, t, b, f, ai, hai, min_rate, \
                          max_cut, clamp, first_cnp_rate, halve_in_hyper, burst";

enum SetError {
    Unknown,
    Bad(&'static str, &'static str),
}

fn set_dcqcn(p: &mut DcqcnParams, key: &str, v: &str) -> Result<&'static str, SetError> {
    fn with<T>(k: &'static str, r: Result<T, UnitError>) -> Result<T, SetError> {
        r.map_err(|e| SetError::Bad(k, reason(e)))
    }
    let k = match key {
        "g" | "alpha_gain" => "g",
        "k" | "alpha_period" => "k",
        "alpha_mode" => "alpha_mode",
        "alpha0" | "initial_alpha" => "alpha0",
        "reduce_period" | "rate_reduce_period" => "reduce_period",
        "t" | "timer" => "t",
        "b" | "byte_counter" => "b",
        "f" | "fast_recovery" => "f",
        "ai" | "rai" => "ai",
        "hai" | "rhai" => "hai",
        "min_rate" | "rmin" => "min_rate",
        "max_cut" => "max_cut",
        "clamp" | "clamp_tgt_rate" => "clamp",
        "first_cnp_rate" => "first_cnp_rate",
        "halve_in_hyper" => "halve_in_hyper",
        "burst" => "burst",
        _ => return Err(SetError::Unknown),
    };
    match k {
        "g" => p.g = with(k, units::fraction(v))?,
        "k" => p.alpha_period = with(k, units::duration(v))?,
        "alpha_mode" => {
            p.alpha_mode = match v.to_ascii_lowercase().replace('_', "-").as_str() {
                "on-cut" | "oncut" | "per-cnp" => AlphaMode::OnCut,
                "periodic" => AlphaMode::Periodic,
                _ => return Err(SetError::Bad(k, "expected on-cut or periodic")),
            }
        }
        "alpha0" => p.initial_alpha = with(k, units::fraction(v))?,
        "reduce_period" => p.rate_reduce_period = with(k, units::duration(v))?,
        "t" => p.increase_timer = with(k, units::duration(v))?,
        "b" => p.byte_counter = with(k, units::size(v))?,
        "f" => {
            p.fast_recovery_steps = v
                .parse()
                .map_err(|_| SetError::Bad(k, "expected an integer"))?;
        }
        "ai" => p.ai_rate_bps = with(k, units::rate(v))?,
        "hai" => p.hai_rate_bps = with(k, units::rate(v))?,
        "min_rate" => p.min_rate_bps = with(k, units::rate(v))?,
        "max_cut" => p.max_cut = with(k, units::fraction(v))?,
        "clamp" => p.clamp_target_rate = with(k, units::boolean(v))?,
        "first_cnp_rate" => {
            p.first_cnp_rate_bps = match v.to_ascii_lowercase().as_str() {
                "off" | "none" => None,
                _ => Some(with(k, units::rate(v))?).filter(|&r| r > 0),
            }
        }
        "halve_in_hyper" => p.halve_in_hyper = with(k, units::boolean(v))?,
        _ => p.burst_bytes = with(k, units::size(v))?,
    }
    Ok(k)
}

/// The reason a unit error gives, for [`CcConfigError::BadValue`].
fn reason(e: UnitError) -> &'static str {
    match e {
        UnitError::Expected(what) => what,
        UnitError::OutOfRange => "value out of range",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    const M: u64 = 1_000_000;
    const G: u64 = 1_000_000_000;

    /// `s.parse::<CcConfig>()` as the tests moved from the stack wrote it.
    trait ParseCc {
        fn parse_cc(&self) -> Result<CcConfig, CcConfigError>;
    }
    impl ParseCc for str {
        fn parse_cc(&self) -> Result<CcConfig, CcConfigError> {
            parse(self)
        }
    }

    #[test]
    fn presets_by_name() {
        assert_eq!("none".parse_cc(), Ok(CcConfig::None));
        assert_eq!("dcqcn".parse_cc(), Ok(CcConfig::PAPER));
        assert_eq!(" Paper ".parse_cc(), Ok(CcConfig::PAPER));
        assert_eq!("nvidia".parse_cc(), Ok(CcConfig::NVIDIA));
        assert_eq!("NVIDIA:".parse_cc(), Ok(CcConfig::NVIDIA));
    }

    #[test]
    fn overrides() {
        let c: CcConfig = "nvidia:t=55us, min_rate=100Mbps,clamp=true,g=1/256,b=0,F=3,ai=1.5G,\
                           alpha-mode=on-cut,reduce_period=0,first_cnp_rate=25Gb/s,alpha0=0.5,\
                           k=0.5ms,hai=2000000,halve_in_hyper=yes,burst=32KiB"
            .parse_cc()
            .unwrap();
        let want = DcqcnParams {
            increase_timer: Duration::from_micros(55),
            min_rate_bps: 100 * M,
            clamp_target_rate: true,
            g: 1.0 / 256.0,
            byte_counter: 0,
            fast_recovery_steps: 3,
            ai_rate_bps: 1_500 * M,
            alpha_mode: AlphaMode::OnCut,
            rate_reduce_period: Duration::ZERO,
            first_cnp_rate_bps: Some(25 * G),
            initial_alpha: 0.5,
            alpha_period: Duration::from_micros(500),
            hai_rate_bps: 2 * M,
            halve_in_hyper: true,
            burst_bytes: 32 * 1024,
            ..DcqcnParams::nvidia()
        };
        assert_eq!(c, CcConfig::Dcqcn(want));
        assert_eq!(
            "fixed:rate=2.5G".parse_cc(),
            Ok(CcConfig::Fixed {
                rate_bps: 2_500 * M,
                burst_bytes: DEFAULT_BURST_BYTES
            })
        );
        assert_eq!(
            "dcqcn:first_cnp_rate=off,timer=1ms,byte_counter=300KB,rmin=1kbps".parse_cc(),
            Ok(CcConfig::Dcqcn(DcqcnParams {
                increase_timer: Duration::from_millis(1),
                byte_counter: 300_000,
                min_rate_bps: 1000,
                ..DcqcnParams::paper()
            }))
        );
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "none",
            "paper",
            "nvidia",
            "fixed:rate=7.3G,burst=1",
            "nvidia:g=0.3,first_cnp_rate=1G,alpha_mode=on-cut,t=1.5us",
            "hpcc",
            "hpcc:eta=0.9,max_stage=3,wai=120,t=12.5us,min_rate=1G",
        ] {
            let c: CcConfig = s.parse_cc().unwrap();
            let shown = c.to_string();
            assert_eq!(shown.parse_cc(), Ok(c), "{s} → {shown}");
        }
        assert!(CcConfig::PAPER
            .to_string()
            .starts_with("dcqcn:g=0.00390625,k=55000ns,alpha_mode=on-cut,alpha0=0.5,"));
    }

    #[test]
    fn parse_errors_say_what_is_wrong() {
        let err = |s: &str| s.parse_cc().unwrap_err();
        assert_eq!(
            err("cubic"),
            CcConfigError::UnknownPreset {
                name: "cubic".into()
            }
        );
        assert!(err("cubic")
            .to_string()
            .contains("none, fixed, dcqcn, paper, nvidia"));
        assert!(
            matches!(err("dcqcn:zz=1"), CcConfigError::UnknownKey { ref key, .. } if key == "zz")
        );
        assert!(err("dcqcn:zz=1").to_string().contains("min_rate"));
        assert!(err("hpcc:eta=2").to_string().contains("eta"));
        assert!(err("hpcc:zz=1").to_string().contains("max_stage"));
        assert!(parse_no_int("hpcc").is_err() && parse_no_int("paper").is_ok());
        assert!(matches!(err("dcqcn:t"), CcConfigError::NotKeyValue { .. }));
        let e = err("dcqcn:t=55");
        assert!(
            matches!(e, CcConfigError::BadValue { key: "t", .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("55us"), "{e}");
        assert!(matches!(
            err("dcqcn:g=2"),
            CcConfigError::BadValue { key: "g", .. }
        ));
        assert!(matches!(
            err("dcqcn:ai=fast"),
            CcConfigError::BadValue { key: "ai", .. }
        ));
        assert!(matches!(
            err("dcqcn:ai=40Mfoo"),
            CcConfigError::BadValue { key: "ai", .. }
        ));
        assert!(matches!(
            err("dcqcn:b=-1"),
            CcConfigError::BadValue { key: "b", .. }
        ));
        assert!(matches!(
            err("dcqcn:ai=1e30"),
            CcConfigError::BadValue { key: "ai", .. }
        ));
        assert!(matches!(
            err("dcqcn:clamp=maybe"),
            CcConfigError::BadValue { .. }
        ));
        assert!(matches!(
            err("dcqcn:alpha_mode=x"),
            CcConfigError::BadValue { .. }
        ));
        assert!(matches!(
            err("dcqcn:f=-1"),
            CcConfigError::BadValue { key: "f", .. }
        ));
        assert_eq!(
            err("dcqcn:t=1us,timer=2us"),
            CcConfigError::Duplicate { key: "t" }
        );
        assert!(matches!(
            err("dcqcn:t=0,b=0"),
            CcConfigError::InvalidParams { .. }
        ));
        assert!(matches!(
            err("dcqcn:k=0"),
            CcConfigError::InvalidParams { .. }
        ));
        assert_eq!(err("fixed"), CcConfigError::MissingRate);
        assert_eq!(err("fixed:rate=0"), CcConfigError::MissingRate);
        assert!(matches!(
            err("fixed:g=1"),
            CcConfigError::UnknownKey {
                preset: "fixed",
                ..
            }
        ));
        assert_eq!(
            err("none:x=1"),
            CcConfigError::NoParameters { preset: "none" }
        );
    }
}
