//! Zyron's benchmark harness.
//!
//! A suite is a cargo integration test named `<suite>_bench.rs`. It measures
//! with [`Samples`] (HDR histograms), runs its peer in the same process run,
//! interleaved with Zyron, and records each figure as a [`Metric`] in a
//! [`SuiteRun`], which writes the result pair (`.json` and `.txt`) described
//! in `docs/benchmarks.md`. Suites never assert timings; they assert the
//! answers they measured.
//!
//! ```no_run
//! use zyron_bench::{Metric, Samples, Scale, SuiteRun};
//! let mut run = SuiteRun::new("example");
//! let mut samples = Samples::new();
//! for _ in 0..run.scale().pick(3, 30) {
//!     let started = std::time::Instant::now();
//!     // ... work ...
//!     samples.record_duration(started.elapsed());
//! }
//! run.push(Metric::latency_ms("work", &samples));
//! run.finish().unwrap();
//! ```

pub mod deltalake;
pub mod duckdb;
pub mod machine;
pub mod postgres;
pub mod python;
pub mod result;
pub mod samples;
pub mod seaweedfs;
pub mod vortex;

pub use result::{Metric, Peer, SuiteResult, SuiteRun};
pub use samples::{Samples, process_cpu_time};

/// How much work a suite does: `smoke` (seconds, run by CI) or `full` (published).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Smoke,
    Full,
}

impl Scale {
    /// From `ZYRON_BENCH_SCALE` (`smoke` when unset).
    pub fn from_env() -> Self {
        match std::env::var("ZYRON_BENCH_SCALE").as_deref() {
            Ok("full") => Scale::Full,
            Ok("smoke") | Err(_) => Scale::Smoke,
            Ok(other) => panic!("ZYRON_BENCH_SCALE must be `smoke` or `full`, not `{other}`"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Scale::Smoke => "smoke",
            Scale::Full => "full",
        }
    }

    /// `smoke` at smoke scale, `full` at full scale.
    pub fn pick<T>(self, smoke: T, full: T) -> T {
        match self {
            Scale::Smoke => smoke,
            Scale::Full => full,
        }
    }
}

/// Runs `ours` and `peer` alternately (A B A B ...) `rounds` times, so that
/// drift in a noisy machine affects both sides alike.
pub fn interleave<E>(
    rounds: usize,
    mut ours: impl FnMut(usize) -> Result<(), E>,
    mut peer: impl FnMut(usize) -> Result<(), E>,
) -> Result<(), E> {
    for round in 0..rounds {
        ours(round)?;
        peer(round)?;
    }
    Ok(())
}

/// The workspace root (where `benchmarks/` lives), found from the manifest folder of the
/// package cargo is running (see [`manifest_dir`]).
pub fn workspace_root() -> std::path::PathBuf {
    let manifest = manifest_dir(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|dir| dir.join("benchmarks").is_dir() && dir.join("Cargo.lock").is_file())
        .unwrap_or_else(|| {
            manifest
                .parent()
                .and_then(|p| p.parent())
                .expect("crate lives in crates/")
        })
        .to_path_buf()
}

/// The manifest folder of the package being run: the one cargo sets for the process (`cargo
/// test`, `cargo run`), else `compiled`, the value `env!("CARGO_MANIFEST_DIR")` had at build
/// time. The compile-time value alone is not enough: cargo does not rebuild when only the
/// checkout's path changes, so a shared target directory can hand one clone a build made in
/// another, which would then read and write the other clone's files.
pub fn manifest_dir(compiled: &str) -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(compiled))
}
