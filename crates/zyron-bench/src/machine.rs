//! What machine and build produced a result.

use std::process::Command;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gb: f64,
    pub os: String,
    pub kernel: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Build {
    pub profile: String,
    pub rustc: String,
}

impl Machine {
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|line| line.starts_with("model name"))
            .and_then(|line| line.split(':').nth(1))
            .map(|model| model.trim().to_owned())
            .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kb: f64 = meminfo
            .lines()
            .find(|line| line.starts_with("MemTotal:"))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kb| kb.parse().ok())
            .unwrap_or(0.0);
        Self {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gb: (memory_kb / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            os: std::env::consts::OS.to_owned(),
            kernel: command_output("uname", &["-r"]).unwrap_or_else(|| "unknown".into()),
        }
    }
}

impl Build {
    pub fn detect() -> Self {
        let rustc = command_output("rustc", &["--version"])
            .and_then(|v| v.split_whitespace().nth(1).map(str::to_owned))
            .unwrap_or_else(|| "unknown".into());
        Self {
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .into(),
            rustc,
        }
    }
}

/// The short commit hash and whether the tree has uncommitted changes.
pub fn git_state(root: &std::path::Path) -> (String, bool) {
    let root = root.to_string_lossy();
    let sha = command_output("git", &["-C", &root, "rev-parse", "--short=7", "HEAD"])
        .unwrap_or_else(|| "unknown".into());
    let dirty = command_output(
        "git",
        &["-C", &root, "status", "--porcelain", "--untracked-files=no"],
    )
    .is_some_and(|status| !status.is_empty());
    (sha, dirty)
}

pub(crate) fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}
