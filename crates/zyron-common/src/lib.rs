//! Zyron's shared vocabulary: the error type every layer returns (carrying a
//! PostgreSQL SQLSTATE so the gateway can report it unchanged) and the
//! configuration types the server reads from its TOML file, the hybrid
//! logical clock behind commit timestamps, and the on-disk checksum.
//!
//! This crate must stay light: no DataFusion, no tokio, no arrow.

pub mod checksum;
pub mod config;
pub mod error;
pub mod hlc;

pub use config::{
    Config, DEFAULT_BUSY_POLL_US, DEFAULT_DATA_DIR, DEFAULT_PG_ADDR, MAX_BUSY_POLL_US,
};
pub use error::{Result, SqlState, ZyronError};
