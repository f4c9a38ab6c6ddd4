//! The server's configuration: defaults, then the TOML file, then flags.
//!
//! ```toml
//! data_dir = "./zyron-data"
//! pg_listen = "127.0.0.1:5433"
//! max_connections = 100
//! shutdown_grace_ms = 10000
//! target_partitions = 2
//! heap_memory_budget_mib = 4096
//! checkpoint_wal_mib = 256
//! busy_poll_us = 50
//! follow_client_cpu = true
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Result, SqlState, ZyronError};

/// Where data lives when nothing else is said.
pub const DEFAULT_DATA_DIR: &str = "./zyron-data";
/// PostgreSQL's port plus one, so Zyron and PostgreSQL can run side by side.
pub const DEFAULT_PG_ADDR: &str = "127.0.0.1:5433";
/// How long an idle server polls a client's socket after a reply: long enough
/// for a client that answers at once (pgbench, one application connection).
pub const DEFAULT_BUSY_POLL_US: u64 = 50;
/// The longest busy-poll budget accepted: past it the server would spend more
/// on polling than a sleeping thread costs to wake.
pub const MAX_BUSY_POLL_US: u64 = 10_000;

/// Everything `zyron serve` can be told. Field names are the TOML keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Directory holding the server's files (created if missing).
    pub data_dir: PathBuf,
    /// Address of the PostgreSQL wire protocol listener (TCP).
    pub pg_listen: SocketAddr,
    /// Connections beyond this many are refused with SQLSTATE 53300.
    pub max_connections: usize,
    /// On SIGINT/SIGTERM, how long in-flight queries may run before they are cancelled.
    pub shutdown_grace_ms: u64,
    /// Parallelism of one query (DataFusion target partitions); 0 means one per core.
    pub target_partitions: usize,
    /// Memory one query may use before it spills or fails, in MiB; 0 means no limit.
    pub query_memory_limit_mib: usize,
    /// Memory heap tables (rows, their versions and primary-key indexes) may hold,
    /// in MiB. Past it writes fail with SQLSTATE 53200 and nothing already
    /// written is lost.
    pub heap_memory_budget_mib: usize,
    /// A checkpoint is taken after this much WAL, in MiB; it bounds recovery time.
    pub checkpoint_wal_mib: u64,
    /// After a reply, how long the server polls the client's socket before
    /// sleeping, in µs, when no other query is running; 0 turns it off. It
    /// trades idle CPU for the time a sleeping thread takes to wake.
    pub busy_poll_us: u64,
    /// While the server has one connection, run the threads serving it on the
    /// CPU its messages arrive on: for a client on the same machine, a round
    /// trip then wakes no idle CPU. Undone when a second connection opens and
    /// while DataFusion runs a plan.
    pub follow_client_cpu: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            pg_listen: DEFAULT_PG_ADDR.parse().expect("default address parses"),
            max_connections: 100,
            shutdown_grace_ms: 10_000,
            target_partitions: 0,
            query_memory_limit_mib: 0,
            heap_memory_budget_mib: 4096,
            checkpoint_wal_mib: 256,
            busy_poll_us: DEFAULT_BUSY_POLL_US,
            follow_client_cpu: true,
        }
    }
}

impl Config {
    /// Parses a TOML configuration; unknown keys are an error so typos do not pass silently.
    pub fn from_toml(text: &str) -> Result<Self> {
        toml_parse(text)
    }

    /// Checks the limits that would otherwise fail later and less clearly.
    pub fn validate(&self) -> Result<()> {
        if self.max_connections == 0 {
            return Err(config_error("max_connections must be at least 1"));
        }
        if self.heap_memory_budget_mib == 0 {
            return Err(config_error("heap_memory_budget_mib must be at least 1"));
        }
        if self.checkpoint_wal_mib == 0 {
            return Err(config_error("checkpoint_wal_mib must be at least 1"));
        }
        if self.busy_poll_us > MAX_BUSY_POLL_US {
            return Err(config_error(format!(
                "busy_poll_us must be at most {MAX_BUSY_POLL_US}, not {}",
                self.busy_poll_us
            )));
        }
        Ok(())
    }
}

fn config_error(message: impl Into<String>) -> ZyronError {
    ZyronError::new(SqlState::CONFIG_FILE_ERROR, message)
}

fn toml_parse(text: &str) -> Result<Config> {
    toml::from_str(text).map_err(|e| config_error(format!("invalid configuration: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_overrides_defaults() {
        let config = Config::from_toml(
            "# comment\ndata_dir = \"/tmp/z\" # trailing\npg_listen = \"0.0.0.0:6000\"\nmax_connections = 1_000\n",
        )
        .unwrap();
        assert_eq!(config.data_dir, PathBuf::from("/tmp/z"));
        assert_eq!(config.pg_listen.port(), 6000);
        assert_eq!(config.max_connections, 1000);
        assert_eq!(
            config.shutdown_grace_ms,
            Config::default().shutdown_grace_ms
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_line() {
        let err = Config::from_toml("data_dir = \"x\"\nport = 1\n").unwrap_err();
        assert!(err.message().contains("line 2"), "{err}");
        assert!(err.message().contains("port"), "{err}");
        let err = Config::from_toml("max_connections = \"lots\"\n").unwrap_err();
        assert!(err.message().contains("line 1"), "{err}");
    }

    #[test]
    fn busy_poll_budget_is_bounded() {
        let config = Config::from_toml("busy_poll_us = 0\n").unwrap();
        assert!(config.validate().is_ok());
        let config = Config::from_toml("busy_poll_us = 10001\n").unwrap();
        let err = config.validate().unwrap_err();
        assert!(err.message().contains("busy_poll_us"), "{err}");
    }
}
