//! A hybrid logical clock: commit timestamps that follow wall-clock time when
//! it moves forward and never go backwards when it does not.
//!
//! A timestamp is one `u64`: milliseconds since the Unix epoch in the high 48
//! bits and a logical counter in the low 16. Timestamps from [`Hlc::now`] are
//! strictly increasing within a process; [`Hlc::observe`] folds in a timestamp
//! seen elsewhere (a recovered commit, another node) so later ones exceed it.
//!
//! ```
//! use zyron_common::hlc::Hlc;
//! let clock = Hlc::new();
//! let a = clock.now();
//! let b = clock.now();
//! assert!(b > a);
//! clock.observe(b + 1_000_000);
//! assert!(clock.now() > b + 1_000_000);
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Bits of a timestamp that hold the logical counter.
pub const LOGICAL_BITS: u32 = 16;

/// A hybrid logical clock; cheap to share (`&Hlc` is enough, it is lock-free).
#[derive(Debug, Default)]
pub struct Hlc {
    last: AtomicU64,
}

impl Hlc {
    pub fn new() -> Self {
        Self::default()
    }

    /// A timestamp greater than every timestamp this clock has returned or observed.
    pub fn now(&self) -> u64 {
        let physical = physical_now_ms() << LOGICAL_BITS;
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let next = physical.max(last + 1);
            match self
                .last
                .compare_exchange_weak(last, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }

    /// Makes every later [`Hlc::now`] exceed `timestamp`.
    pub fn observe(&self, timestamp: u64) {
        self.last.fetch_max(timestamp, Ordering::AcqRel);
    }

    /// The physical part of a timestamp, in milliseconds since the Unix epoch.
    pub fn physical_ms(timestamp: u64) -> u64 {
        timestamp >> LOGICAL_BITS
    }
}

fn physical_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_increase_across_threads() {
        let clock = std::sync::Arc::new(Hlc::new());
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let clock = clock.clone();
                std::thread::spawn(move || (0..10_000).map(|_| clock.now()).collect::<Vec<_>>())
            })
            .collect();
        let mut all: Vec<u64> = Vec::new();
        for handle in handles {
            let seen = handle.join().unwrap();
            assert!(seen.windows(2).all(|w| w[0] < w[1]));
            all.extend(seen);
        }
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count, "no timestamp is handed out twice");
    }

    #[test]
    fn physical_part_is_wall_clock_milliseconds() {
        let clock = Hlc::new();
        let wall = physical_now_ms();
        let physical = Hlc::physical_ms(clock.now());
        assert!(physical >= wall && physical < wall + 60_000);
    }
}
