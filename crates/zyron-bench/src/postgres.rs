//! A throwaway PostgreSQL server for side-by-side runs: `initdb` into a
//! temporary directory, then `postgres` on a free loopback port.
//!
//! PostgreSQL refuses to run as root, so when the harness runs as root the
//! server runs as the `postgres` system user (via `runuser`).

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::machine::command_output;

/// A PostgreSQL cluster in a temporary directory; the server is stopped and
/// the directory removed on drop.
pub struct TempPostgres {
    bin_dir: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    run_as: Option<String>,
    server: Option<Child>,
}

/// The folder holding `initdb` and `postgres`, from `pg_config --bindir`.
pub fn bin_dir() -> Result<PathBuf, String> {
    let candidates = command_output("pg_config", &["--bindir"])
        .map(PathBuf::from)
        .into_iter()
        .chain(["/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin"].map(PathBuf::from));
    for dir in candidates {
        if dir.join("initdb").is_file() && dir.join("postgres").is_file() {
            return Ok(dir);
        }
    }
    Err("PostgreSQL server binaries not found (install postgresql-15)".into())
}

fn is_root() -> bool {
    command_output("id", &["-u"]).as_deref() == Some("0")
}

/// A free TCP port on loopback (bound and released; fine for tests on one
/// machine), never one this process was handed before: the kernel may give
/// a just-released port out again, and a server started with the same port
/// for two listeners fails to start.
pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    const MAX_TRIES: usize = 1_000;
    for _ in 0..MAX_TRIES {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("loopback has free ports");
        if handed_out.insert(port) {
            return port;
        }
    }
    panic!("the kernel offered only ports this process already used ({MAX_TRIES} tries)")
}

impl TempPostgres {
    /// Runs `initdb` with trust authentication; the server is not started yet.
    pub fn init() -> Result<Self, String> {
        let bin_dir = bin_dir()?;
        let run_as = is_root().then(|| "postgres".to_owned());
        let dir = tempfile::Builder::new()
            .prefix("zyron-peer-pg")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?;
        if let Some(user) = &run_as {
            let status = Command::new("chown")
                .args(["-R", user])
                .arg(dir.path())
                .status()
                .map_err(|e| format!("chown: {e}"))?;
            if !status.success() {
                return Err(format!("chown {} to {user} failed", dir.path().display()));
            }
        }
        let pg = Self {
            bin_dir,
            dir,
            port: free_port(),
            run_as,
            server: None,
        };
        let data = pg.data_dir();
        let output = pg
            .command("initdb")
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "-D",
            ])
            .arg(&data)
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(pg)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin_dir.join(program);
        match &self.run_as {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(path);
                command
            }
            None => Command::new(path),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn connection_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    /// Spawns `postgres` with the given `-c name=value` settings; returns at
    /// once. Use [`wait_until_accepting`] to know when it is ready.
    pub fn spawn(&mut self, settings: &[(&str, &str)]) -> Result<(), String> {
        assert!(self.server.is_none(), "server already running");
        let mut command = self.command("postgres");
        command
            .arg("-D")
            .arg(self.data_dir())
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args([
                "-c",
                &format!("unix_socket_directories={}", self.dir.path().display()),
            ]);
        for (name, value) in settings {
            command.args(["-c", &format!("{name}={value}")]);
        }
        let log =
            std::fs::File::create(self.dir.path().join("server.log")).map_err(|e| e.to_string())?;
        let child = command
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting postgres: {e}"))?;
        self.server = Some(child);
        Ok(())
    }

    /// The server's process id (of `runuser` when run as root; signals reach postgres through it).
    pub fn pid(&self) -> Option<u32> {
        self.server.as_ref().map(Child::id)
    }

    /// Stops the server with `signal` (`TERM` smart, `INT` fast) and waits for it to exit.
    pub fn stop(&mut self, signal: &str) -> Result<Duration, String> {
        let Some(mut child) = self.server.take() else {
            return Ok(Duration::ZERO);
        };
        let started = Instant::now();
        // Signal the postgres postmaster itself: its pid is in postmaster.pid.
        let pid = self.postmaster_pid().unwrap_or(child.id());
        let status = Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("kill -{signal} {pid} failed"));
        }
        child.wait().map_err(|e| e.to_string())?;
        Ok(started.elapsed())
    }

    fn postmaster_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.data_dir().join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        if self.server.is_some() {
            let _ = self.stop("QUIT");
        }
    }
}

/// Polls `127.0.0.1:port` until a TCP connection succeeds; returns the time waited.
pub fn wait_until_accepting(port: u16, timeout: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    while started.elapsed() < timeout {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(started.elapsed());
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    Err(format!(
        "nothing accepted connections on port {port} within {timeout:?}"
    ))
}
