//! Where the values an off-path sender must not be able to guess come from: each QP's first
//! PSN, the key byte and virtual address of every memory region, the first QPN. RoCE has no
//! authentication; an attacker who cannot see the traffic has to guess the destination QPN,
//! a PSN inside the receive window and, for RDMA, a valid rkey and address (IBTA Vol 1 §9.7.1
//! on PSN validation, §10.6.3 on memory keys and their variant part). By default they come from
//! the operating system's CSPRNG; a run asked to be reproducible (`--seed`) derives them from
//! its seed instead, and says so in its report.
use roce_proto::{Psn, QKey};
use roce_stack::rng::Rng;
use roce_stack::{Device, DeviceConfig};

use crate::SetupFailure;

/// The source of an end's secrets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Secrets {
    /// Fresh values from the operating system's CSPRNG (`getrandom`).
    #[default]
    OsRandom,
    /// Values derived from a seed: reproducible, and so guessable by anyone who knows it.
    Seeded(u64),
}

/// The lowest first QPN a device is given (QPNs 0 and 1 are the special QPs, IBTA Vol 1
/// §3.5.3; a few more are left for the management QPs other stacks number low).
const MIN_QPN_BASE: u32 = 0x100;

impl Secrets {
    /// `Seeded(seed)` when a seed is given, [`Secrets::OsRandom`] otherwise.
    pub fn from_seed(seed: Option<u64>) -> Self {
        seed.map_or(Self::OsRandom, Self::Seeded)
    }

    /// The seed, when the secrets are derived from one.
    pub fn seed(&self) -> Option<u64> {
        match self {
            Self::OsRandom => None,
            Self::Seeded(s) => Some(*s),
        }
    }

    /// A generator of secret values for the use named by `salt` (distinct salts give
    /// independent streams from one seed).
    pub fn rng(&self, salt: u64) -> Result<Rng, SetupFailure> {
        let seed = match self {
            Self::OsRandom => getrandom::u64().map_err(SetupFailure::Random)?,
            Self::Seeded(s) => s ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        };
        Ok(Rng::new(seed))
    }

    /// A device whose first QPN and memory keys and addresses come from these secrets
    /// (`salt` tells the two ends of a seeded run apart).
    pub fn device(&self, salt: u64) -> Result<Device, SetupFailure> {
        let mut rng = self.rng(salt ^ 0xde71_ce00)?;
        let config = DeviceConfig::default();
        // Room for every QP the device may create below 2^24.
        let span = (1u64 << 24) - u64::from(MIN_QPN_BASE) - u64::from(config.max_qps);
        let qpn_base = MIN_QPN_BASE + rng.below(span) as u32;
        Ok(Device::new(DeviceConfig {
            qpn_base,
            key_seed: rng.next_u64(),
            ..config
        }))
    }

    /// The seed of a communication manager's communication and transaction IDs (`salt`
    /// tells the two ends of a seeded run apart).
    pub fn cm_seed(&self, salt: u64) -> Result<u64, SetupFailure> {
        Ok(self.rng(salt ^ 0xc0_3300)?.next_u64())
    }

    /// A Q_Key for a run's UD QPs, so that nobody off the path can address a datagram to
    /// them (a fixed one, such as perftest's 0x11111111, is known to everyone): 31 random
    /// bits, the high bit clear (a set one names a controlled Q_Key, IBTA Vol 1 §10.2.4).
    pub fn qkey(&self, salt: u64) -> Result<QKey, SetupFailure> {
        Ok(QKey(
            (self.rng(salt ^ 0x0d_9e7)?.next_u64() as u32) & 0x7fff_ffff,
        ))
    }

    /// First PSNs of `n` QPs (`salt` tells the two ends of a seeded run apart).
    pub fn start_psns(&self, n: u32, salt: u64) -> Result<Vec<Psn>, SetupFailure> {
        let mut rng = self.rng(salt)?;
        Ok((0..n).map(|_| Psn::new(rng.next_u64() as u32)).collect())
    }
}

impl std::fmt::Display for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::OsRandom => f.write_str("from the OS random generator"),
            Self::Seeded(s) => write!(f, "derived from seed {s} (predictable)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_secrets_differ_between_devices_and_seeded_ones_repeat() {
        let psns = |s: Secrets| s.start_psns(8, 1).unwrap();
        assert_ne!(psns(Secrets::OsRandom), psns(Secrets::OsRandom));
        assert_eq!(psns(Secrets::Seeded(5)), psns(Secrets::Seeded(5)));
        assert_ne!(psns(Secrets::Seeded(5)), psns(Secrets::Seeded(6)));
        assert_ne!(
            Secrets::Seeded(5).start_psns(8, 1).unwrap(),
            Secrets::Seeded(5).start_psns(8, 2).unwrap(),
            "the two ends of a seeded run get different PSNs"
        );
        let first = |s: Secrets| {
            let mut d = s.device(0).unwrap();
            let pd = d.alloc_pd();
            let mr = d.reg_mr(pd, 64, roce_stack::Access::REMOTE_WRITE);
            let m = d.mr(mr).unwrap();
            (m.rkey(), m.va())
        };
        assert_ne!(first(Secrets::OsRandom), first(Secrets::OsRandom));
        assert_eq!(first(Secrets::Seeded(3)), first(Secrets::Seeded(3)));
    }
}
