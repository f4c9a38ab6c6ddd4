//! A long-lived Python worker speaking one JSON request and one JSON reply per line, so that
//! Python start-up is never part of a measurement. Peers that only have Python packages
//! (DuckDB, Vortex) run through it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::Value;

/// Prepended to every worker script: replies go to the original stdout, and anything the
/// library prints itself (progress bars) goes to stderr instead of corrupting the protocol.
const PRELUDE: &str =
    "import sys, os, json, time\nreply = os.fdopen(os.dup(1), 'w')\nos.dup2(2, 1)\n";

/// A running worker.
pub struct PythonWorker {
    name: &'static str,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// The version of Python package `module`, or why it cannot be imported.
pub fn package_version(module: &str, pip_name: &str) -> Result<String, String> {
    let output = Command::new("python3")
        .args([
            "-c",
            &format!("import {module}; print({module}.__version__)"),
        ])
        .output()
        .map_err(|e| format!("python3 not runnable: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        Err(format!(
            "the Python package {pip_name} is not installed (pip install {pip_name})"
        ))
    }
}

impl PythonWorker {
    /// Starts `script` (which reads requests from `sys.stdin` and writes replies with
    /// `reply.write(json.dumps(...) + "\n"); reply.flush()`).
    pub fn start(name: &'static str, script: &str, args: &[String]) -> Result<Self, String> {
        let mut child = Command::new("python3")
            .args(["-u", "-c", &format!("{PRELUDE}{script}")])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting python3 for {name}: {e}"))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Ok(Self {
            name,
            child,
            stdin,
            stdout,
        })
    }

    /// Sends one request; a reply with `"ok": false` becomes an error carrying its `"error"`.
    pub fn request(&mut self, request: &Value) -> Result<Value, String> {
        let name = self.name;
        writeln!(self.stdin, "{request}").map_err(|e| format!("{name} worker: {e}"))?;
        self.stdin
            .flush()
            .map_err(|e| format!("{name} worker: {e}"))?;
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .map_err(|e| format!("{name} worker: {e}"))?;
        if line.is_empty() {
            return Err(format!("{name} worker exited"));
        }
        let reply: Value = serde_json::from_str(&line).map_err(|e| format!("{name} reply: {e}"))?;
        if reply["ok"] != Value::Bool(true) {
            return Err(format!(
                "{name}: {}",
                reply["error"].as_str().unwrap_or("unknown error")
            ));
        }
        Ok(reply)
    }
}

impl Drop for PythonWorker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
