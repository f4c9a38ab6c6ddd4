//! PostgreSQL run-time parameters (`SET`/`SHOW`) as a session sees them.
//!
//! Drivers set and read a handful of PostgreSQL parameters on connect
//! (`extra_float_digits`, `application_name`, `DateStyle`, ...). Zyron keeps
//! them per session so `SHOW` answers what `SET` said. `TimeZone` also sets
//! DataFusion's session time zone. Unknown names get SQLSTATE 42704, as in
//! PostgreSQL; names starting with `datafusion.` go to DataFusion.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
use datafusion::prelude::SessionContext;
use datafusion::scalar::ScalarValue;

use zyron_common::{Result, SqlState, ZyronError};

/// What `SHOW server_version` and the startup parameter report. Drivers parse
/// the leading number to pick protocol features; Zyron speaks PostgreSQL 16's.
pub const SERVER_VERSION: &str = "16.0";

/// What `SELECT version()` returns.
pub fn version_string() -> String {
    format!(
        "PostgreSQL {SERVER_VERSION} (Zyron {}) on {}-linux, compiled by rustc",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    )
}

/// The parameters a session starts with, by lower-case name.
fn defaults() -> BTreeMap<&'static str, (&'static str, String)> {
    // (display name, value)
    [
        ("application_name", ""),
        ("client_encoding", "UTF8"),
        ("client_min_messages", "notice"),
        ("datestyle", "ISO, MDY"),
        ("default_transaction_isolation", "read committed"),
        ("extra_float_digits", "1"),
        ("integer_datetimes", "on"),
        ("intervalstyle", "postgres"),
        ("lc_messages", "C"),
        ("max_identifier_length", "63"),
        ("search_path", "\"$user\", public"),
        ("server_encoding", "UTF8"),
        ("server_version", SERVER_VERSION),
        ("standard_conforming_strings", "on"),
        ("statement_timeout", "0"),
        ("synchronous_commit", "on"),
        ("timezone", "UTC"),
        ("transaction_isolation", "read committed"),
        ("transaction_read_only", "off"),
    ]
    .into_iter()
    .map(|(name, value)| (name, (display_name(name), value.to_owned())))
    .collect()
}

fn display_name(lower: &'static str) -> &'static str {
    match lower {
        "datestyle" => "DateStyle",
        "intervalstyle" => "IntervalStyle",
        "timezone" => "TimeZone",
        other => other,
    }
}

/// Parameters PostgreSQL reports but that cannot be changed by a session.
const READ_ONLY: &[&str] = &[
    "server_version",
    "server_encoding",
    "integer_datetimes",
    "max_identifier_length",
];

/// One session's parameters.
#[derive(Debug, Clone)]
pub struct Settings {
    values: BTreeMap<&'static str, (&'static str, String)>,
}

impl Default for Settings {
    fn default() -> Self {
        Self { values: defaults() }
    }
}

impl Settings {
    /// `SHOW name`: the value, or 42704 for an unknown name.
    pub fn get(&self, name: &str) -> Result<(&'static str, &str)> {
        let key = name.to_ascii_lowercase();
        self.values
            .get(key.as_str())
            .map(|(display, value)| (*display, value.as_str()))
            .ok_or_else(|| unrecognized(name))
    }

    /// The value of a parameter Zyron itself reads on every statement, by
    /// its lower-case name: no allocation, unlike [`Settings::get`].
    fn known(&self, lower_name: &'static str) -> &str {
        debug_assert_eq!(lower_name, lower_name.to_ascii_lowercase());
        self.values
            .get(lower_name)
            .map(|(_, value)| value.as_str())
            .unwrap_or_default()
    }

    /// `SET name = value` (value already unquoted). `DEFAULT` restores the default.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let key = name.to_ascii_lowercase();
        if READ_ONLY.contains(&key.as_str()) {
            return Err(ZyronError::new(
                SqlState::CANT_CHANGE_RUNTIME_PARAM,
                format!("parameter \"{name}\" cannot be changed"),
            ));
        }
        let default = defaults();
        let Some((&static_key, (display, default_value))) = default.get_key_value(key.as_str())
        else {
            return Err(unrecognized(name));
        };
        let value = if value.eq_ignore_ascii_case("default") {
            default_value.clone()
        } else {
            value.to_owned()
        };
        if static_key == "statement_timeout" && crate::deadline::parse_timeout(&value).is_none() {
            return Err(ZyronError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!("invalid value for parameter \"{display}\": \"{value}\""),
            ));
        }
        self.values.insert(static_key, (display, value));
        Ok(())
    }

    /// `synchronous_commit`: whether COMMIT waits for the WAL to be on disk.
    pub fn durability(&self) -> zyron_heap::Durability {
        let value = self.known("synchronous_commit");
        if ["off", "false", "0"]
            .iter()
            .any(|off| value.eq_ignore_ascii_case(off))
        {
            zyron_heap::Durability::Asynchronous
        } else {
            zyron_heap::Durability::Synchronous
        }
    }

    /// `statement_timeout`: how long a statement may run, or `None` for no limit.
    pub fn statement_timeout(&self) -> Option<std::time::Duration> {
        crate::deadline::parse_timeout(self.known("statement_timeout")).flatten()
    }

    /// `default_transaction_isolation` as Zyron runs it.
    pub fn default_isolation(&self) -> zyron_txn::Isolation {
        parse_isolation(self.known("default_transaction_isolation"))
    }

    /// Every parameter, for `SHOW ALL`.
    pub fn all(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.values
            .values()
            .map(|(name, value)| (*name, value.as_str()))
    }
}

/// PostgreSQL's isolation level names; SERIALIZABLE runs as snapshot
/// isolation (REPEATABLE READ), READ UNCOMMITTED as READ COMMITTED, as in PostgreSQL.
pub fn parse_isolation(value: &str) -> zyron_txn::Isolation {
    let contains = |word: &str| {
        value
            .as_bytes()
            .windows(word.len())
            .any(|window| window.eq_ignore_ascii_case(word.as_bytes()))
    };
    if contains("repeatable") || contains("serializable") {
        zyron_txn::Isolation::RepeatableRead
    } else {
        zyron_txn::Isolation::ReadCommitted
    }
}

fn unrecognized(name: &str) -> ZyronError {
    ZyronError::new(
        SqlState::UNDEFINED_OBJECT,
        format!("unrecognized configuration parameter \"{name}\""),
    )
}

/// PostgreSQL functions that clients call on connect.
pub fn register_functions(ctx: &SessionContext) {
    let version = version_string();
    ctx.register_udf(create_udf(
        "version",
        vec![],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(move |_args: &[ColumnarValue]| {
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                version.clone(),
            ))))
        }),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_then_show_round_trips_and_default_restores() {
        let mut settings = Settings::default();
        settings.set("extra_float_digits", "3").unwrap();
        assert_eq!(settings.get("EXTRA_FLOAT_DIGITS").unwrap().1, "3");
        settings.set("extra_float_digits", "DEFAULT").unwrap();
        assert_eq!(settings.get("extra_float_digits").unwrap().1, "1");
        assert_eq!(settings.get("timezone").unwrap().0, "TimeZone");
    }

    #[test]
    fn unknown_and_read_only_parameters_are_refused() {
        let mut settings = Settings::default();
        let err = settings.set("no_such_thing", "1").unwrap_err();
        assert_eq!(err.sqlstate(), SqlState::UNDEFINED_OBJECT);
        let err = settings.set("server_version", "1").unwrap_err();
        assert_eq!(err.sqlstate().code(), "55P02");
    }
}
