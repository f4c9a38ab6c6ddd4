//! The result files: one JSON and one TXT per suite run.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::machine::{Build, Machine, git_state};
use crate::samples::{Samples, Spread};
use crate::{Scale, workspace_root};

/// One figure of a suite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub name: String,
    pub unit: String,
    pub higher_is_better: bool,
    /// The headline value: the median of the samples.
    pub value: f64,
    pub samples: u64,
    pub min: f64,
    pub p50: f64,
    pub p95: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99: Option<f64>,
    pub max: f64,
    #[serde(default)]
    pub params: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<Peer>,
}

/// The same figure measured on a peer system in the same run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Peer {
    pub system: String,
    pub value: f64,
    /// How many times better Zyron is: value/peer when higher is better,
    /// peer/value when lower is better. Above 1 means Zyron is ahead.
    pub ratio: f64,
}

impl Metric {
    pub fn from_spread(name: &str, unit: &str, higher_is_better: bool, spread: Spread) -> Self {
        Self {
            name: name.to_owned(),
            unit: unit.to_owned(),
            higher_is_better,
            value: spread.p50,
            samples: spread.count,
            min: spread.min,
            p50: spread.p50,
            p95: spread.p95,
            p99: Some(spread.p99),
            max: spread.max,
            params: Map::new(),
            peer: None,
        }
    }

    /// A quantity measured once (a file size, a fraction skipped): one sample.
    pub fn single(name: &str, unit: &str, higher_is_better: bool, value: f64) -> Self {
        let spread = Spread {
            count: 1,
            min: value,
            p50: value,
            p95: value,
            p99: value,
            max: value,
        };
        Self::from_spread(name, unit, higher_is_better, spread)
    }

    /// The same measurement under another name (one metric per peer compared).
    pub fn renamed(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// A latency in milliseconds (lower is better).
    pub fn latency_ms(name: &str, samples: &Samples) -> Self {
        Self::from_spread(name, "ms", false, samples.spread_ms())
    }

    /// A throughput or other value recorded with [`Samples::for_values`].
    pub fn throughput(name: &str, unit: &str, samples: &Samples) -> Self {
        Self::from_spread(name, unit, true, samples.spread(1.0))
    }

    pub fn param(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.params.insert(key.to_owned(), value.into());
        self
    }

    /// Attaches the peer's median for the same measurement.
    pub fn with_peer(mut self, system: &str, peer_value: f64) -> Self {
        let ratio = if self.higher_is_better {
            self.value / peer_value
        } else {
            peer_value / self.value
        };
        self.peer = Some(Peer {
            system: system.to_owned(),
            value: peer_value,
            ratio: if ratio.is_finite() { ratio } else { 0.0 },
        });
        self
    }
}

/// The whole JSON file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteResult {
    pub suite: String,
    pub timestamp: String,
    pub git_sha: String,
    pub git_dirty: bool,
    pub scale: String,
    pub machine: Machine,
    pub build: Build,
    pub results: Vec<Metric>,
    /// Comparisons that could not run, with the reason (a missing peer tool, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

impl SuiteResult {
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn metric(&self, name: &str) -> Option<&Metric> {
        self.results.iter().find(|m| m.name == name)
    }

    /// The human-readable table written next to the JSON.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "suite {} | scale {} | {} | git {}{} | {} ({} cores, {} GB) | rustc {} {}",
            self.suite,
            self.scale,
            self.timestamp,
            self.git_sha,
            if self.git_dirty { "+dirty" } else { "" },
            self.machine.cpu,
            self.machine.cores,
            self.machine.memory_gb,
            self.build.rustc,
            self.build.profile
        );
        let _ = writeln!(
            out,
            "{:<36} {:>12} {:<8} {:>10} {:>10} {:>10} {:>10} {:>7}  {:<28} {:>12} {:>7}",
            "metric",
            "value",
            "unit",
            "min",
            "p50",
            "p95",
            "max",
            "samples",
            "peer",
            "peer value",
            "ratio"
        );
        for m in &self.results {
            let (peer, peer_value, ratio) = match &m.peer {
                Some(p) => (
                    p.system.as_str(),
                    format!("{:.4}", p.value),
                    format!("{:.2}x", p.ratio),
                ),
                None => ("-", "-".to_owned(), "-".to_owned()),
            };
            let _ = writeln!(
                out,
                "{:<36} {:>12.4} {:<8} {:>10.4} {:>10.4} {:>10.4} {:>10.4} {:>7}  {:<28} {:>12} {:>7}",
                m.name,
                m.value,
                m.unit,
                m.min,
                m.p50,
                m.p95,
                m.max,
                m.samples,
                peer,
                peer_value,
                ratio
            );
        }
        for reason in &self.skipped {
            let _ = writeln!(out, "skipped: {reason}");
        }
        out
    }
}

/// A suite run in progress.
pub struct SuiteRun {
    result: SuiteResult,
    scale: Scale,
}

impl SuiteRun {
    pub fn new(suite: &str) -> Self {
        let scale = Scale::from_env();
        let (git_sha, git_dirty) = git_state(&workspace_root());
        Self {
            result: SuiteResult {
                suite: suite.to_owned(),
                timestamp: chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
                git_sha,
                git_dirty,
                scale: scale.name().to_owned(),
                machine: Machine::detect(),
                build: Build::detect(),
                results: Vec::new(),
                skipped: Vec::new(),
            },
            scale,
        }
    }

    pub fn scale(&self) -> Scale {
        self.scale
    }

    pub fn push(&mut self, metric: Metric) {
        println!(
            "{:<36} {:>12.4} {} (p95 {:.4}, n={}){}",
            metric.name,
            metric.value,
            metric.unit,
            metric.p95,
            metric.samples,
            metric
                .peer
                .as_ref()
                .map(|p| format!("  vs {} {:.4}: {:.2}x", p.system, p.value, p.ratio))
                .unwrap_or_default()
        );
        self.result.results.push(metric);
    }

    /// Records a comparison that could not run, and says why on stdout.
    pub fn skip(&mut self, reason: impl Into<String>) {
        let reason = reason.into();
        println!("skipped: {reason}");
        self.result.skipped.push(reason);
    }

    /// Where this run's files go: `benchmarks/<suite>/` for full runs, under
    /// `target/bench-results/` for smoke runs (or `ZYRON_BENCH_OUT`).
    pub fn output_dir(&self) -> PathBuf {
        if let Ok(dir) = std::env::var("ZYRON_BENCH_OUT") {
            return PathBuf::from(dir).join(&self.result.suite);
        }
        let root = workspace_root();
        match self.scale {
            Scale::Full => root.join("benchmarks").join(&self.result.suite),
            Scale::Smoke => root
                .join("target")
                .join("bench-results")
                .join(&self.result.suite),
        }
    }

    /// Writes `<suite>_<YYYY-MM-DD_HHMMSS>_<sha>.json` and `.txt`; returns the JSON path.
    pub fn finish(self) -> std::io::Result<PathBuf> {
        let dir = self.output_dir();
        std::fs::create_dir_all(&dir)?;
        let stamp = self
            .result
            .timestamp
            .replace('T', "_")
            .replace([':', 'Z'], "");
        let base = format!("{}_{}_{}", self.result.suite, stamp, self.result.git_sha);
        let json_path = dir.join(format!("{base}.json"));
        let json = serde_json::to_string_pretty(&self.result).map_err(std::io::Error::other)?;
        std::fs::write(&json_path, json + "\n")?;
        std::fs::write(dir.join(format!("{base}.txt")), self.result.to_text())?;
        println!("results written to {}", json_path.display());
        Ok(json_path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_is_above_one_when_zyron_is_ahead_either_way() {
        let mut fast = Samples::new();
        fast.record_duration(std::time::Duration::from_millis(10));
        let latency = Metric::latency_ms("q", &fast).with_peer("peer", 20.0);
        assert!((latency.peer.unwrap().ratio - 2.0).abs() < 0.01);
        let mut rate = Samples::for_values();
        rate.record_value(300.0);
        let throughput = Metric::throughput("r", "rows/s", &rate).with_peer("peer", 100.0);
        assert!((throughput.peer.unwrap().ratio - 3.0).abs() < 0.01);
    }

    #[test]
    fn json_round_trips_and_text_lists_every_metric() {
        let mut samples = Samples::new();
        samples.record_duration(std::time::Duration::from_millis(5));
        let out = tempfile::tempdir().unwrap();
        // SAFETY: tests in this crate that read ZYRON_BENCH_OUT run only here.
        unsafe { std::env::set_var("ZYRON_BENCH_OUT", out.path()) };
        let mut run = SuiteRun::new("unit");
        run.push(Metric::latency_ms("boot", &samples).param("rows", 10));
        run.skip("peer missing");
        let path = run.finish().unwrap();
        let read = SuiteResult::read(&path).unwrap();
        assert_eq!(read.suite, "unit");
        assert_eq!(read.metric("boot").unwrap().params["rows"], 10);
        assert_eq!(read.skipped, vec!["peer missing".to_owned()]);
        let text = std::fs::read_to_string(path.with_extension("txt")).unwrap();
        assert!(text.contains("boot") && text.contains("skipped: peer missing"));
    }
}
