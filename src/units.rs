//! The one reading of sizes, rates and durations on the command line.
//!
//! * Sizes are bytes: `4096`, `64K`, `1M`, `2G` with binary multiples (K = 1024, as perftest's
//!   `-s 64K`), also written `KiB`/`MiB`/`GiB`; the SI forms `KB`/`MB`/`GB` are decimal
//!   (1000). So `64K` is 65,536 bytes wherever a size is read, in `--size` as in
//!   `--cc dcqcn:b=64K`.
//! * Rates are bits per second with decimal multiples, as link speeds are quoted: `40Mbps`,
//!   `2.5G`, `25gbit/s`, `100000000`.
//! * Durations need a unit: `300ns`, `55us` (or `µs`), `1.5ms`, `2s`; a bare `0` is allowed.
//! * Fractions: `0.5` or `1/256`; booleans: `true`/`false`, `on`/`off`, `yes`/`no`, `1`/`0`.
use core::time::Duration;

/// Why a value did not read as what was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UnitError {
    /// Not a number of the kind asked for, with the forms that are.
    #[error("expected {0}")]
    Expected(&'static str),
    /// A number too large for its field.
    #[error("value out of range")]
    OutOfRange,
}

const SIZE: &str = "a size such as 4096, 64K, 1M or 300KB";
const RATE: &str = "a rate such as 40Mbps, 2.5G or 100000000 (bit/s)";
const DURATION: &str = "a duration with a unit such as 55us, 1.5ms or 300ns";
const FRACTION: &str = "a number in [0, 1] such as 0.5 or 1/256";

/// Splits `40Mbps` into (`40`, `mbps`) at the first letter (or `µ`/`μ`/`/`).
fn split_unit(v: &str) -> (&str, String) {
    let v = v.trim();
    let at = v
        .char_indices()
        .find(|&(_, c)| c.is_alphabetic() || c == '/')
        .map_or(v.len(), |(i, _)| i);
    (v[..at].trim(), v[at..].trim().to_lowercase())
}

/// `number × scale` as a u64: integers exactly, decimals rounded.
fn scaled(num: &str, scale: u64, what: &'static str) -> Result<u64, UnitError> {
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(scale).ok_or(UnitError::OutOfRange);
    }
    let x: f64 = num.parse().map_err(|_| UnitError::Expected(what))?;
    let y = x * scale as f64;
    if !x.is_finite() || x < 0.0 {
        return Err(UnitError::Expected(what));
    }
    if y >= u64::MAX as f64 {
        return Err(UnitError::OutOfRange);
    }
    Ok(y.round() as u64)
}

/// A size in bytes (see the module docs).
pub(crate) fn size(v: &str) -> Result<u64, UnitError> {
    let (num, unit) = split_unit(v);
    let scale = match unit.as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return Err(UnitError::Expected(SIZE)),
    };
    scaled(num, scale, SIZE)
}

/// A size that must fit a `u32`.
pub(crate) fn size_u32(v: &str) -> Result<u32, UnitError> {
    u32::try_from(size(v)?).map_err(|_| UnitError::OutOfRange)
}

/// `N` (every message N bytes) or `MIN-MAX` / `MIN..MAX`.
pub(crate) fn size_range(v: &str) -> Result<(u32, u32), String> {
    let split = v.split_once("..").or_else(|| v.split_once('-'));
    let parse = |s: &str| size_u32(s).map_err(|e| format!("{s:?}: {e}"));
    let (lo, hi) = match split {
        Some((a, b)) => (parse(a)?, parse(b)?),
        None => {
            let n = parse(v)?;
            (n, n)
        }
    };
    if lo > hi {
        return Err(format!("size range {v:?} runs backwards"));
    }
    Ok((lo, hi))
}

/// A rate in bits per second (see the module docs).
pub(crate) fn rate(v: &str) -> Result<u64, UnitError> {
    let (num, unit) = split_unit(v);
    let prefix = ["bits/s", "bit/s", "bps", "b/s", "bit"]
        .iter()
        .find_map(|s| unit.strip_suffix(s))
        .unwrap_or(&unit);
    let scale = match prefix {
        "" => 1,
        "k" => 1_000,
        "m" => 1_000_000,
        "g" => 1_000_000_000,
        "t" => 1_000_000_000_000,
        _ => return Err(UnitError::Expected(RATE)),
    };
    scaled(num, scale, RATE)
}

/// A duration with a unit (see the module docs).
pub(crate) fn duration(v: &str) -> Result<Duration, UnitError> {
    let (num, unit) = split_unit(v);
    let scale = match unit.as_str() {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "" if num.parse::<f64>() == Ok(0.0) => 1,
        _ => return Err(UnitError::Expected(DURATION)),
    };
    scaled(num, scale, DURATION).map(Duration::from_nanos)
}

/// A number in `[0, 1]`: `0.5`, `1/256`.
pub(crate) fn fraction(v: &str) -> Result<f64, UnitError> {
    let bad = UnitError::Expected(FRACTION);
    let x = match v.split_once('/') {
        Some((a, b)) => {
            let a: f64 = a.trim().parse().map_err(|_| bad)?;
            let b: f64 = b.trim().parse().map_err(|_| bad)?;
            a / b
        }
        None => v.trim().parse().map_err(|_| bad)?,
    };
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(bad)
    }
}

/// A boolean.
pub(crate) fn boolean(v: &str) -> Result<bool, UnitError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "on" | "yes" => Ok(true),
        "false" | "0" | "off" | "no" => Ok(false),
        _ => Err(UnitError::Expected("true or false")),
    }
}

/// A probability for clap (`--loss 0.05`).
pub(crate) fn probability(v: &str) -> Result<f64, String> {
    let p: f64 = v
        .trim()
        .parse()
        .map_err(|_| format!("{v:?} is not a number"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("a probability is between 0 and 1, not {p}"))
    }
}

/// A number in decimal or `0x` hex (QPNs).
pub(crate) fn number_u32(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_meaning_of_k() {
        assert_eq!(size("64K"), Ok(65_536));
        assert_eq!(size("64k"), Ok(65_536));
        assert_eq!(size("64KiB"), Ok(65_536));
        assert_eq!(size("64KB"), Ok(64_000));
        assert_eq!(size("1M"), Ok(1 << 20));
        assert_eq!(size("10MB"), Ok(10_000_000));
        assert_eq!(size("2G"), Ok(2 << 30));
        assert_eq!(size("300000"), Ok(300_000));
        assert_eq!(size("1.5K"), Ok(1536));
        assert!(size("1.5.5k").is_err());
        assert!(size("lots").is_err());
        assert!(size_u32("8G").is_err());
        assert_eq!(rate("64K"), Ok(64_000), "a rate's k is decimal");
    }

    #[test]
    fn size_ranges() {
        assert_eq!(size_range("4096"), Ok((4096, 4096)));
        assert_eq!(size_range("0-1M"), Ok((0, 1 << 20)));
        assert_eq!(size_range("64..64k"), Ok((64, 65536)));
        assert!(size_range("1M-2").is_err());
        assert!(size_range("lots").is_err());
        assert!(size_range("8G").is_err());
    }

    #[test]
    fn value_parsers() {
        assert_eq!(rate("40Mbps"), Ok(40_000_000));
        assert_eq!(rate("2.5Gb/s"), Ok(2_500_000_000));
        assert_eq!(rate("25 gbit/s"), Ok(25_000_000_000));
        assert_eq!(rate("100000000"), Ok(100_000_000));
        assert_eq!(rate("1T"), Ok(1_000_000_000_000));
        assert!(rate("40Mbytes").is_err());
        assert!(rate("").is_err());
        assert!(rate("NaN").is_err());
        assert_eq!(duration("55us"), Ok(Duration::from_micros(55)));
        assert_eq!(duration("55µs"), Ok(Duration::from_micros(55)));
        assert_eq!(duration("1.5ms"), Ok(Duration::from_micros(1500)));
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        assert!(duration("55").is_err());
        assert!(duration("inf s").is_err());
        assert_eq!(size("32KiB"), Ok(32 * 1024));
        assert_eq!(fraction("1/256"), Ok(1.0 / 256.0));
        assert_eq!(fraction("0.5"), Ok(0.5));
        assert!(fraction("1/0").is_err());
        assert!(fraction("-0.1").is_err());
        assert_eq!(boolean("Yes"), Ok(true));
        assert_eq!(boolean("off"), Ok(false));
        assert_eq!(probability("0.25"), Ok(0.25));
        assert!(probability("2").is_err());
        assert_eq!(number_u32("0x13"), Ok(0x13));
        assert_eq!(number_u32("19"), Ok(19));
    }
}
