//! The real `zyron` binary as a child process: started on a data directory
//! with a config file, killed with SIGKILL, restarted on the same directory.
//! Its log (stderr) is collected in memory, so a test can read what the
//! server said (why it refused to start, what recovery replayed) without
//! writing to the disk under test.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls};

pub const ZYRON: &str = env!("CARGO_BIN_EXE_zyron");

/// How long a start (including crash recovery) may take before the test fails.
const START_TIMEOUT: Duration = Duration::from_secs(300);

pub struct ZyronProcess {
    child: Child,
    pub port: u16,
    log: Arc<Mutex<String>>,
    /// From spawning the process to its first accepted connection.
    pub start_time: Duration,
}

impl ZyronProcess {
    /// Starts `zyron serve` on `dir/data`, with `config` (TOML) written to
    /// `dir/zyron.toml`; returns once it accepts connections, or the log if
    /// it exited.
    pub fn start(dir: &Path, config: &str) -> Result<ZyronProcess, String> {
        let port = zyron_bench::postgres::free_port();
        let config_path = dir.join("zyron.toml");
        std::fs::write(&config_path, config).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let mut child = Command::new(ZYRON)
            .args(["serve", "--config"])
            .arg(&config_path)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {ZYRON}: {e}"))?;
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("stderr is piped");
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let mut server = ZyronProcess {
            child,
            port,
            log,
            start_time: Duration::ZERO,
        };
        server.wait_ready()?;
        server.start_time = started.elapsed();
        Ok(server)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the reader thread take the last lines the process wrote.
                let _ = self.child.wait();
                std::thread::sleep(Duration::from_millis(50));
                return Err(format!("server exited ({status}): {}", self.log()));
            }
            if let Ok(stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                // With nothing listening yet, the kernel can pick the target port itself as the
                // source port and connect the socket to itself (TCP simultaneous open).
                if stream.local_addr().map(|a| a.port()).ok() != Some(self.port) {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Err(format!("server did not start within {START_TIMEOUT:?}"))
    }

    /// Everything the server has logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// SIGKILL: no shutdown work of any kind, as in a power cut of the process.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    pub fn connection_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    pub async fn connect(&self) -> Client {
        let (client, connection) = tokio_postgres::connect(&self.connection_string(), NoTls)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "connecting to the server on port {}: {e:?}\nits log:\n{}",
                    self.port,
                    self.log()
                )
            });
        tokio::spawn(connection);
        client
    }
}

impl Drop for ZyronProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of `key=value` in the last log line that contains `marker`.
pub fn logged_field(log: &str, marker: &str, key: &str) -> Option<f64> {
    let line = log.lines().rev().find(|l| l.contains(marker))?;
    let prefix = format!("{key}=");
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
}
