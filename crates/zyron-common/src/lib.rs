//! Zyron's shared vocabulary: the error type every layer returns (carrying a
//! PostgreSQL SQLSTATE so the gateway can report it unchanged) and the
//! configuration types the server reads from its TOML file.
//!
//! This crate must stay light: no DataFusion, no tokio, no arrow.

pub mod config;
pub mod error;

pub use config::{Config, DEFAULT_DATA_DIR, DEFAULT_PG_ADDR};
pub use error::{Result, SqlState, ZyronError};
