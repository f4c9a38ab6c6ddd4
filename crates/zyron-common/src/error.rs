//! Errors with SQLSTATE codes.
//!
//! Every error that can reach a client carries the five-character SQLSTATE
//! code PostgreSQL would use for the same condition, so drivers that branch on
//! codes (retry on `40001`, ignore `42P07`, ...) behave as they do against
//! PostgreSQL.
//!
//! ```
//! use zyron_common::{SqlState, ZyronError};
//! let err = ZyronError::new(SqlState::UNDEFINED_TABLE, "table \"t\" does not exist");
//! assert_eq!(err.sqlstate().code(), "42P01");
//! ```

use std::fmt;

/// A PostgreSQL SQLSTATE code (see the PostgreSQL manual, appendix A).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SqlState(&'static str);

impl SqlState {
    pub const SUCCESSFUL_COMPLETION: SqlState = SqlState("00000");
    pub const WARNING: SqlState = SqlState("01000");
    pub const CONNECTION_EXCEPTION: SqlState = SqlState("08000");
    pub const PROTOCOL_VIOLATION: SqlState = SqlState("08P01");
    pub const FEATURE_NOT_SUPPORTED: SqlState = SqlState("0A000");
    pub const CARDINALITY_VIOLATION: SqlState = SqlState("21000");
    pub const DATA_EXCEPTION: SqlState = SqlState("22000");
    pub const NUMERIC_VALUE_OUT_OF_RANGE: SqlState = SqlState("22003");
    pub const DATETIME_FIELD_OVERFLOW: SqlState = SqlState("22008");
    pub const DIVISION_BY_ZERO: SqlState = SqlState("22012");
    pub const INVALID_PARAMETER_VALUE: SqlState = SqlState("22023");
    pub const INVALID_TEXT_REPRESENTATION: SqlState = SqlState("22P02");
    pub const BAD_COPY_FILE_FORMAT: SqlState = SqlState("22P04");
    pub const CHARACTER_NOT_IN_REPERTOIRE: SqlState = SqlState("22021");
    pub const NOT_NULL_VIOLATION: SqlState = SqlState("23502");
    pub const UNIQUE_VIOLATION: SqlState = SqlState("23505");
    pub const ACTIVE_SQL_TRANSACTION: SqlState = SqlState("25001");
    pub const NO_ACTIVE_SQL_TRANSACTION: SqlState = SqlState("25P01");
    pub const IN_FAILED_SQL_TRANSACTION: SqlState = SqlState("25P02");
    pub const INVALID_SQL_STATEMENT_NAME: SqlState = SqlState("26000");
    pub const SERIALIZATION_FAILURE: SqlState = SqlState("40001");
    pub const DEADLOCK_DETECTED: SqlState = SqlState("40P01");
    pub const CHECK_VIOLATION: SqlState = SqlState("23514");
    pub const INVALID_TABLE_DEFINITION: SqlState = SqlState("42P16");
    pub const INVALID_SAVEPOINT_SPECIFICATION: SqlState = SqlState("3B001");
    pub const LOCK_NOT_AVAILABLE: SqlState = SqlState("55P03");
    pub const SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION: SqlState = SqlState("42000");
    pub const SYNTAX_ERROR: SqlState = SqlState("42601");
    pub const UNDEFINED_COLUMN: SqlState = SqlState("42703");
    pub const UNDEFINED_FUNCTION: SqlState = SqlState("42883");
    pub const UNDEFINED_TABLE: SqlState = SqlState("42P01");
    pub const UNDEFINED_OBJECT: SqlState = SqlState("42704");
    pub const UNDEFINED_SCHEMA: SqlState = SqlState("3F000");
    pub const DUPLICATE_TABLE: SqlState = SqlState("42P07");
    pub const WRONG_OBJECT_TYPE: SqlState = SqlState("42809");
    pub const DEPENDENT_OBJECTS_STILL_EXIST: SqlState = SqlState("2BP01");
    pub const DUPLICATE_SCHEMA: SqlState = SqlState("42P06");
    pub const DUPLICATE_OBJECT: SqlState = SqlState("42710");
    pub const AMBIGUOUS_COLUMN: SqlState = SqlState("42702");
    pub const DATATYPE_MISMATCH: SqlState = SqlState("42804");
    pub const PROGRAM_LIMIT_EXCEEDED: SqlState = SqlState("54000");
    pub const INSUFFICIENT_RESOURCES: SqlState = SqlState("53000");
    pub const OUT_OF_MEMORY: SqlState = SqlState("53200");
    pub const DISK_FULL: SqlState = SqlState("53100");
    pub const CANT_CHANGE_RUNTIME_PARAM: SqlState = SqlState("55P02");
    pub const TOO_MANY_CONNECTIONS: SqlState = SqlState("53300");
    pub const QUERY_CANCELED: SqlState = SqlState("57014");
    pub const ADMIN_SHUTDOWN: SqlState = SqlState("57P01");
    pub const CANNOT_CONNECT_NOW: SqlState = SqlState("57P03");
    pub const IO_ERROR: SqlState = SqlState("58030");
    pub const CONFIG_FILE_ERROR: SqlState = SqlState("F0000");
    pub const INTERNAL_ERROR: SqlState = SqlState("XX000");
    pub const DATA_CORRUPTED: SqlState = SqlState("XX001");

    /// The five-character code, as sent in the `C` field of an ErrorResponse.
    pub const fn code(self) -> &'static str {
        self.0
    }
}

impl fmt::Debug for SqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SqlState({})", self.0)
    }
}

impl fmt::Display for SqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// An error that knows how PostgreSQL would report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZyronError {
    sqlstate: SqlState,
    message: String,
    hint: Option<String>,
}

pub type Result<T, E = ZyronError> = std::result::Result<T, E>;

impl ZyronError {
    pub fn new(sqlstate: SqlState, message: impl Into<String>) -> Self {
        Self {
            sqlstate,
            message: message.into(),
            hint: None,
        }
    }

    /// Adds a hint, shown by psql on a `HINT:` line.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(SqlState::INTERNAL_ERROR, message)
    }

    pub fn not_supported(message: impl Into<String>) -> Self {
        Self::new(SqlState::FEATURE_NOT_SUPPORTED, message)
    }

    pub fn io(context: &str, err: &std::io::Error) -> Self {
        let sqlstate = match err.raw_os_error() {
            Some(28) => SqlState::DISK_FULL, // ENOSPC
            _ => SqlState::IO_ERROR,
        };
        Self::new(sqlstate, format!("{context}: {err}"))
    }

    pub fn sqlstate(&self) -> SqlState {
        self.sqlstate
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }
}

impl fmt::Display for ZyronError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (SQLSTATE {})", self.message, self.sqlstate)
    }
}

impl std::error::Error for ZyronError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_five_characters() {
        for code in [
            SqlState::SYNTAX_ERROR,
            SqlState::UNDEFINED_TABLE,
            SqlState::UNDEFINED_COLUMN,
            SqlState::DIVISION_BY_ZERO,
            SqlState::ADMIN_SHUTDOWN,
        ] {
            assert_eq!(code.code().len(), 5, "{code:?}");
        }
    }

    #[test]
    fn enospc_maps_to_disk_full() {
        let err = std::io::Error::from_raw_os_error(28);
        assert_eq!(
            ZyronError::io("writing", &err).sqlstate(),
            SqlState::DISK_FULL
        );
        let other = std::io::Error::from_raw_os_error(5);
        assert_eq!(
            ZyronError::io("reading", &other).sqlstate(),
            SqlState::IO_ERROR
        );
    }
}
