//! Recording measurements in an HDR histogram and summarising their spread.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Values recorded with 3 significant digits, from 1 unit up.
///
/// Durations are recorded in nanoseconds; other values (rows/s, MB/s) are
/// recorded as given, scaled by 1000 so three decimals survive.
pub struct Samples {
    histogram: Histogram<u64>,
    scale: f64,
}

/// Spread of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub count: u64,
    pub min: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Default for Samples {
    fn default() -> Self {
        Self::new()
    }
}

impl Samples {
    pub fn new() -> Self {
        Self {
            histogram: Histogram::new(3).expect("3 significant digits is valid"),
            scale: 1.0,
        }
    }

    /// For non-duration values such as throughputs.
    pub fn for_values() -> Self {
        Self {
            histogram: Histogram::new(3).expect("3 significant digits is valid"),
            scale: 1000.0,
        }
    }

    pub fn record_duration(&mut self, elapsed: Duration) {
        self.record_raw(elapsed.as_nanos().min(u64::MAX as u128) as u64);
    }

    pub fn record_value(&mut self, value: f64) {
        assert!(
            value.is_finite() && value >= 0.0,
            "sample must be finite and non-negative: {value}"
        );
        self.record_raw((value * self.scale).round() as u64);
    }

    fn record_raw(&mut self, raw: u64) {
        self.histogram
            .record(raw.max(1))
            .expect("histogram grows to fit any u64");
    }

    pub fn len(&self) -> u64 {
        self.histogram.len()
    }

    /// Adds every sample of `other` (recorded the same way) to these.
    pub fn merge(&mut self, other: &Samples) {
        assert_eq!(self.scale, other.scale, "merging durations with values");
        self.histogram
            .add(&other.histogram)
            .expect("histogram grows to fit any u64");
    }

    pub fn is_empty(&self) -> bool {
        self.histogram.is_empty()
    }

    /// The spread, with each value divided by `unit` (e.g. 1e6 for ms from ns).
    pub fn spread(&self, unit: f64) -> Spread {
        assert!(!self.is_empty(), "no samples recorded");
        let h = &self.histogram;
        let f = |raw: u64| raw as f64 / self.scale / unit;
        Spread {
            count: h.len(),
            min: f(h.min()),
            p50: f(h.value_at_quantile(0.50)),
            p95: f(h.value_at_quantile(0.95)),
            p99: f(h.value_at_quantile(0.99)),
            max: f(h.max()),
        }
    }

    /// Spread of durations in milliseconds.
    pub fn spread_ms(&self) -> Spread {
        self.spread(1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_known_durations() {
        let mut samples = Samples::new();
        for ms in 1..=100u64 {
            samples.record_duration(Duration::from_millis(ms));
        }
        let spread = samples.spread_ms();
        assert_eq!(spread.count, 100);
        assert!((spread.min - 1.0).abs() < 0.01, "{spread:?}");
        assert!((spread.p50 - 50.0).abs() < 0.1, "{spread:?}");
        assert!((spread.max - 100.0).abs() < 0.1, "{spread:?}");
    }

    #[test]
    fn values_keep_three_decimals() {
        let mut samples = Samples::for_values();
        samples.record_value(1.234);
        assert!((samples.spread(1.0).p50 - 1.234).abs() < 0.002);
    }
}

/// CPU time this process has used so far, all threads together (`CLOCK_PROCESS_CPUTIME_ID`).
/// The difference over a piece of work is what it cost the machine, where wall-clock time
/// is what it cost the caller: a reader that spreads a scan over several threads shows the
/// two apart.
pub fn process_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec; the clock id is a constant Linux knows.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "the process CPU clock is always readable");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

#[cfg(test)]
mod cpu_tests {
    use std::time::{Duration, Instant};

    use super::process_cpu_time;

    /// Other tests run in this process at the same time, so only a lower bound holds.
    #[test]
    fn process_cpu_time_counts_work() {
        let (before, started) = (process_cpu_time(), Instant::now());
        let mut x = 0u64;
        while started.elapsed() < Duration::from_millis(40) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let worked = process_cpu_time() - before;
        assert!(
            worked >= Duration::from_millis(1),
            "40 ms of spinning took {worked:?} of CPU"
        );
    }
}
