//! Run-time parameters a client sets when it connects.
//!
//! PostgreSQL applies every startup parameter that names a setting (`application_name`,
//! `client_encoding`, `DateStyle`, `TimeZone`, ...) and reads `options` as command-line
//! switches: `options='-c synchronous_commit=off'` in a libpq connection string, `PGOPTIONS`,
//! or JDBC's `options`. Zyron does the same, so a session can be configured without a `SET`.

use zyron_common::{Result, SqlState, ZyronError};
use zyron_engine::Session;

/// Startup parameters that are not settings.
const NOT_SETTINGS: &[&str] = &["user", "database", "options", "replication"];

/// Applies a connection's startup parameters to its session, `options` first and the plain
/// parameters after (so those win, as in PostgreSQL). Settings named in `options` must exist
/// and take their value, or the connection is refused; a plain parameter Zyron does not know
/// or cannot take (a driver's `TimeZone` that Arrow cannot parse) is left at its default,
/// since drivers send some that only some servers have, and a connection is worth more.
pub fn apply<'a>(
    session: &mut Session,
    parameters: impl Iterator<Item = (&'a str, &'a str)> + Clone,
) -> Result<()> {
    let options = parameters.clone().find(|(name, _)| *name == "options");
    for (name, value) in parse_options(options.map_or("", |(_, value)| value))? {
        session.set_parameter(&name, &value)?;
    }
    for (name, value) in parameters {
        if NOT_SETTINGS.contains(&name) || !session.knows_parameter(name) {
            continue;
        }
        if let Err(err) = session.set_parameter(name, value) {
            tracing::debug!(name, value, %err, "startup parameter left at its default");
        }
    }
    Ok(())
}

/// The `name=value` pairs of an `options` string: switches `-c name=value`, `-cname=value` or
/// `--name=value`, separated by whitespace, where a backslash makes the next character literal
/// (so `\ ` is a space inside a value). Other switches get 22023.
pub fn parse_options(options: &str) -> Result<Vec<(String, String)>> {
    let words = split_words(options);
    let mut settings = Vec::new();
    let mut words = words.into_iter();
    while let Some(word) = words.next() {
        let assignment = if let Some(rest) = word.strip_prefix("--") {
            rest.to_owned()
        } else if word == "-c" {
            words.next().ok_or_else(|| {
                ZyronError::new(SqlState::SYNTAX_ERROR, "-c requires a value (name=value)")
            })?
        } else if let Some(rest) = word.strip_prefix("-c") {
            rest.to_owned()
        } else {
            return Err(invalid(&format!(
                "unsupported switch \"{word}\" (only -c name=value and --name=value)"
            )));
        };
        let Some((name, value)) = assignment.split_once('=') else {
            return Err(invalid(&format!("\"{assignment}\" is not name=value")));
        };
        // PostgreSQL accepts dashes for underscores in switch names.
        settings.push((name.replace('-', "_"), value.to_owned()));
    }
    Ok(settings)
}

fn split_words(options: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = options.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => word.extend(chars.next()),
            // C's isspace, as PostgreSQL's pg_split_opts: not Unicode spaces such as U+00A0.
            ' ' | '\t' | '\n' | '\x0B' | '\x0C' | '\r' => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

fn invalid(message: &str) -> ZyronError {
    ZyronError::new(
        SqlState::INVALID_PARAMETER_VALUE,
        format!("invalid startup options: {message}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(options: &str) -> Vec<(String, String)> {
        parse_options(options).unwrap()
    }

    #[test]
    fn every_switch_form_gives_name_and_value() {
        let expected = |n: &str, v: &str| vec![(n.to_owned(), v.to_owned())];
        assert_eq!(
            pairs("-c synchronous_commit=off"),
            expected("synchronous_commit", "off")
        );
        assert_eq!(
            pairs("-csynchronous_commit=off"),
            expected("synchronous_commit", "off")
        );
        assert_eq!(
            pairs("--synchronous-commit=off"),
            expected("synchronous_commit", "off")
        );
        assert_eq!(
            pairs("  -c a=1\t--b=2 -cc=x\\ y\u{a0}z "),
            vec![
                ("a".to_owned(), "1".to_owned()),
                ("b".to_owned(), "2".to_owned()),
                ("c".to_owned(), "x y\u{a0}z".to_owned())
            ]
        );
        assert!(pairs("").is_empty());
    }

    #[test]
    fn malformed_options_are_22023() {
        assert_eq!(
            parse_options("-c").unwrap_err().sqlstate(),
            SqlState::SYNTAX_ERROR
        );
        for bad in ["-c novalue", "-D /tmp", "synchronous_commit=off"] {
            let err = parse_options(bad).unwrap_err();
            assert_eq!(err.sqlstate(), SqlState::INVALID_PARAMETER_VALUE, "{bad}");
        }
    }
}
