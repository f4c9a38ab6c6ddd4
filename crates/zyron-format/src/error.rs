//! Errors of the `.zyr` reader and writer.

/// What went wrong while reading or writing a `.zyr` file.
///
/// Every malformed input maps to [`FormatError::Corrupt`] with the place it was found;
/// the reader never panics on file contents.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The bytes do not follow `formats/zyr/SPEC.md`.
    #[error("corrupt .zyr file: {0}")]
    Corrupt(String),
    /// A checksum did not match: the bytes changed after they were written.
    #[error("checksum mismatch in {what}: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        what: String,
        stored: u32,
        computed: u32,
    },
    /// The file needs a newer reader (major version, or an encoding this reader does not know).
    #[error("unsupported .zyr file: {0}")]
    Unsupported(String),
    /// The Arrow data cannot be written (for example a type the format does not cover).
    #[error("cannot write .zyr: {0}")]
    Unwritable(String),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("object store error: {0}")]
    ObjectStore(#[from] object_store::Error),
    #[error("arrow error: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
}

pub type Result<T, E = FormatError> = std::result::Result<T, E>;

impl FormatError {
    /// The error a client sees: a damaged or unreadable file is data
    /// corruption (XX001), not a query error.
    pub fn to_zyron(&self) -> zyron_common::ZyronError {
        use zyron_common::{SqlState, ZyronError};
        match self {
            FormatError::Corrupt(_) | FormatError::Checksum { .. } => {
                ZyronError::new(SqlState::DATA_CORRUPTED, self.to_string())
            }
            FormatError::Unsupported(_) | FormatError::Unwritable(_) => {
                ZyronError::new(SqlState::FEATURE_NOT_SUPPORTED, self.to_string())
            }
            FormatError::Io(io) => ZyronError::io("I/O error on a .zyr file", io),
            FormatError::ObjectStore(_) | FormatError::Arrow(_) => {
                ZyronError::new(SqlState::IO_ERROR, self.to_string())
            }
        }
    }
}

impl From<FormatError> for zyron_common::ZyronError {
    fn from(err: FormatError) -> Self {
        err.to_zyron()
    }
}

/// Shorthand for a [`FormatError::Corrupt`] error.
pub(crate) fn corrupt<T>(what: impl Into<String>) -> Result<T> {
    Err(FormatError::Corrupt(what.into()))
}
