//! The threads of a fabric's run split into parts ([`Sim::set_threads`]): a [`Pool`] kept for
//! the simulation's life runs parts 1.. (the caller's thread runs part 0), and the parts meet
//! at a [`Meeting`] once per lookahead of virtual time, exchanging through [`Shared`] their
//! earliest events and the events that cross between them (conservative parallel discrete
//! event simulation; [`Sim::run_part`] is one part's loop).
use super::{fabric, Instant, Sim};

/// A barrier for the parts of a split run that any part can abort (when its thread
/// panics), so that the others return instead of waiting for it forever. The parts meet
/// once per lookahead of virtual time, thousands of times a second: a waiting part spins
/// briefly (the others are usually about to arrive), then yields its core a while, then
/// sleeps (more parts than cores).
pub(super) struct Meeting {
    /// Arrivals since the generation began.
    count: std::sync::atomic::AtomicUsize,
    /// Meetings completed (changed under `lock`, so that a sleeper cannot miss it).
    generation: std::sync::atomic::AtomicU64,
    aborted: std::sync::atomic::AtomicBool,
    parties: usize,
    lock: std::sync::Mutex<()>,
    cv: std::sync::Condvar,
}

impl Meeting {
    /// Spins before yielding, and yields before sleeping.
    const SPINS: u32 = 4_000;
    const YIELDS: u32 = 64;

    fn new(parties: usize) -> Self {
        Self {
            count: std::sync::atomic::AtomicUsize::new(0),
            generation: std::sync::atomic::AtomicU64::new(0),
            aborted: std::sync::atomic::AtomicBool::new(false),
            parties,
            lock: std::sync::Mutex::new(()),
            cv: std::sync::Condvar::new(),
        }
    }

    fn guard(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits for every part; `false` if one aborted.
    pub(super) fn wait(&self) -> bool {
        use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
        let generation = self.generation.load(Acquire);
        if self.count.fetch_add(1, AcqRel) + 1 == self.parties {
            self.count.store(0, Release);
            {
                let _g = self.guard();
                self.generation.fetch_add(1, Release);
            }
            self.cv.notify_all();
            return !self.aborted.load(Acquire);
        }
        let passed = || self.generation.load(Acquire) != generation || self.aborted.load(Acquire);
        let mut tries = 0u32;
        while !passed() {
            if tries < Self::SPINS {
                std::hint::spin_loop();
            } else if tries < Self::SPINS + Self::YIELDS {
                std::thread::yield_now();
            } else {
                let mut g = self.guard();
                while !passed() {
                    g = self
                        .cv
                        .wait(g)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                break;
            }
            tries += 1;
        }
        !self.aborted.load(Acquire)
    }

    pub(super) fn abort(&self) {
        {
            let _g = self.guard();
            self.aborted
                .store(true, std::sync::atomic::Ordering::Release);
        }
        self.cv.notify_all();
    }
}

/// Aborts the meeting if its part's thread unwinds.
pub(super) struct AbortOnPanic<'a>(pub(super) &'a Meeting);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abort();
        }
    }
}

/// What the parts of a split run share while they run.
pub(super) struct Shared {
    pub(super) meeting: Meeting,
    /// Each part's earliest event, ns (`u64::MAX`: none), with the earliest it sent to
    /// others: two sets, for meetings in turn (a part may write the next meeting's while
    /// another still reads this one's).
    pub(super) next: [Vec<std::sync::atomic::AtomicU64>; 2],
    /// Events for each part from the others.
    pub(super) inbox: Vec<std::sync::Mutex<Vec<fabric::Pending>>>,
}

impl Shared {
    fn new(n: usize) -> Self {
        let next = || {
            (0..n)
                .map(|_| std::sync::atomic::AtomicU64::new(u64::MAX))
                .collect()
        };
        Self {
            meeting: Meeting::new(n),
            next: [next(), next()],
            inbox: (0..n).map(|_| std::sync::Mutex::new(Vec::new())).collect(),
        }
    }
}

/// The threads that run parts 1.. of a split simulation (the caller's runs part 0), kept
/// for the simulation's life: a run hands each its part and takes it back at the end.
pub(super) struct Pool {
    shared: std::sync::Arc<PoolShared>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

struct PoolShared {
    run: Shared,
    /// Each part while its thread has it.
    slots: Vec<std::sync::Mutex<Option<Sim>>>,
    /// The run's (deadline, lookahead in ns); `None`: the threads end.
    job: std::sync::Mutex<Option<(Instant, u64)>>,
}

pub(super) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Pool {
    pub(super) fn new(n: usize) -> Self {
        let shared = std::sync::Arc::new(PoolShared {
            run: Shared::new(n),
            slots: (0..n).map(|_| std::sync::Mutex::new(None)).collect(),
            job: std::sync::Mutex::new(None),
        });
        let threads = (1..n)
            .map(|k| {
                let sh = shared.clone();
                std::thread::Builder::new()
                    .name(format!("sim-part-{k}"))
                    .spawn(move || Self::work(k, &sh))
                    .expect("a thread for a part of the simulation")
            })
            .collect();
        Self { shared, threads }
    }

    /// Part `k`'s thread: a run starts and ends with a meeting of every part.
    fn work(k: usize, sh: &PoolShared) {
        let meeting = &sh.run.meeting;
        let _guard = AbortOnPanic(meeting);
        loop {
            if !meeting.wait() {
                return;
            }
            let Some((deadline, lookahead)) = *lock(&sh.job) else {
                return;
            };
            let Some(mut part) = lock(&sh.slots[k]).take() else {
                meeting.abort();
                return;
            };
            part.run_part(k, &sh.run, lookahead, deadline);
            *lock(&sh.slots[k]) = Some(part);
            if !meeting.wait() {
                return;
            }
        }
    }

    /// Runs `parts` (part 0 on this thread) until `deadline`. `false` if a part's thread
    /// failed (its part is lost).
    pub(super) fn run(&self, parts: &mut Vec<Sim>, deadline: Instant, lookahead: u64) -> bool {
        let sh = &*self.shared;
        for (k, p) in parts.drain(1..).enumerate() {
            *lock(&sh.slots[k + 1]) = Some(p);
        }
        *lock(&sh.job) = Some((deadline, lookahead));
        let mut ok = sh.run.meeting.wait();
        if ok {
            parts[0].run_part(0, &sh.run, lookahead, deadline);
            ok = sh.run.meeting.wait();
        }
        for slot in &sh.slots[1..] {
            match lock(slot).take() {
                Some(p) => parts.push(p),
                None => ok = false,
            }
        }
        ok
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        *lock(&self.shared.job) = None;
        self.shared.run.meeting.wait();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
