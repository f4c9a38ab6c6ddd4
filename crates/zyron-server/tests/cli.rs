//! The `zyron` binary as an operator and a psql user meet it: help text,
//! start-up with the TPC-H demo, psql running the 22 TPC-H queries, the data
//! directory lock, and a clean exit on SIGTERM.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};

const ZYRON: &str = env!("CARGO_BIN_EXE_zyron");

fn run(args: &[&str]) -> std::process::Output {
    Command::new(ZYRON).args(args).output().expect("zyron runs")
}

#[test]
fn help_explains_every_option() {
    let top = run(&["--help"]);
    assert!(top.status.success());
    let top = String::from_utf8(top.stdout).unwrap();
    assert!(top.contains("serve"), "{top}");

    let serve = run(&["serve", "--help"]);
    assert!(serve.status.success());
    let serve = String::from_utf8(serve.stdout).unwrap();
    for option in [
        "--config",
        "--data-dir",
        "--listen",
        "--max-connections",
        "--shutdown-grace-ms",
        "--demo",
        "--demo-scale",
        "--log",
    ] {
        assert!(
            serve.contains(option),
            "serve --help lacks {option}:\n{serve}"
        );
    }
    assert!(
        serve.contains("127.0.0.1:5433") && serve.contains("./zyron-data"),
        "{serve}"
    );
}

#[test]
fn bad_configuration_is_reported_not_panicked() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("zyron.toml");
    std::fs::write(&config, "pg_listen = \"127.0.0.1:5433\"\nno_such_key = 1\n").unwrap();
    let out = run(&["serve", "--config", config.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("zyron: error:") && stderr.contains("no_such_key"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A `zyron serve` child process, ready to accept connections.
struct Served {
    child: Child,
    port: u16,
    _stderr: std::thread::JoinHandle<()>,
}

impl Drop for Served {
    /// A failing test must not leave a server behind (it would also hold the
    /// test harness's output pipe open).
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn serve(data_dir: &Path, extra: &[&str]) -> Served {
    let port = zyron_bench::postgres::free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = Command::new(ZYRON)
        .args(["serve", "--listen", &listen, "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .expect("zyron serve starts");
    let stderr = child.stderr.take().unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || forward_until_ready(stderr, ready_tx));
    let ready = ready_rx
        .recv_timeout(std::time::Duration::from_secs(300))
        .expect("server printed how to connect");
    assert!(ready.contains(&format!("-p {port}")), "{ready}");
    Served {
        child,
        port,
        _stderr: reader,
    }
}

fn forward_until_ready(stderr: ChildStderr, ready: std::sync::mpsc::Sender<String>) {
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = String::new();
    for line in lines.by_ref().map_while(Result::ok) {
        eprintln!("[zyron] {line}");
        seen.push_str(&line);
        seen.push('\n');
        if line.trim_start().starts_with("psql -h") {
            let _ = ready.send(seen.clone());
        }
    }
}

fn psql(port: u16, args: &[&str]) -> Option<std::process::Output> {
    let psql = which("psql")?;
    Some(
        Command::new(psql)
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "analyst",
                "-d",
                "zyron",
            ])
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(args)
            .output()
            .expect("psql runs"),
    )
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(program))
        .find(|path| path.is_file())
}

fn tpch_query_files() -> Vec<PathBuf> {
    let dir = zyron_bench::workspace_root().join("benchmarks/queries/tpch");
    (1..=22).map(|q| dir.join(format!("q{q}.sql"))).collect()
}

#[test]
fn psql_runs_the_22_tpch_queries_on_the_demo_data_then_sigterm_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut served = serve(
        &dir.path().join("data"),
        &["--demo", "tpch", "--demo-scale", "0.01"],
    );

    // One server per data directory.
    let second = run(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
    ]);
    assert!(!second.status.success());
    let message = String::from_utf8_lossy(&second.stderr);
    assert!(
        message.contains("in use by another zyron server"),
        "{message}"
    );

    match psql(served.port, &["-c", "SELECT count(*) FROM lineitem"]) {
        None => eprintln!("skipping the psql part: psql is not installed"),
        Some(out) => {
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let lineitems: u64 = String::from_utf8(out.stdout)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert!((59_000..61_000).contains(&lineitems), "{lineitems}");
            for file in tpch_query_files() {
                let out = psql(served.port, &["-f", file.to_str().unwrap()]).unwrap();
                // Answers are checked against DuckDB's by the tpch suite; here psql must run each cleanly.
                assert!(
                    out.status.success() && out.stderr.is_empty(),
                    "{}: {}",
                    file.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }

    // SIGTERM: graceful shutdown and exit code 0.
    let pid = served.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = served.child.wait().unwrap();
    drop(served);
    assert!(status.success(), "{status:?}");
}
