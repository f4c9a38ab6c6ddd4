//! How two answers are compared: the one place that says where Zyron and
//! PostgreSQL may legitimately differ.
//!
//! - Numbers are compared as numbers: `avg` is `numeric` in PostgreSQL and
//!   `double precision` in Zyron, and the two print floats differently, so a
//!   value with a fraction or an exponent is compared to 12 significant digits.
//! - Rows of a query without a total ORDER BY are compared as multisets.
//! - Two errors agree whatever their SQLSTATEs.
//! - A statement PostgreSQL refuses as invalid (SQLSTATE class 42, or 0A for
//!   a feature it lacks) says nothing of Zyron's answers.
//! - PostgreSQL evaluates constant expressions while it plans, so it fails on
//!   `CAST(1e10 AS INTEGER)` in a query that reads no row, where Zyron answers
//!   with no row.

use std::time::Duration;

use tokio_postgres::{Client, SimpleQueryMessage};

pub type Row = Vec<Option<String>>;

#[derive(Debug)]
pub enum Answer {
    Rows(Vec<Row>),
    Error {
        sqlstate: String,
        message: String,
    },
    /// No answer within [`QUERY_TIMEOUT`].
    Hung,
}

/// Longer than any generated query takes on either server (they read at most
/// three tables of 24 rows).
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(20);

pub async fn answer(client: &Client, sql: &str) -> Answer {
    match tokio::time::timeout(QUERY_TIMEOUT, client.simple_query(sql)).await {
        Err(_) => Answer::Hung,
        Ok(Err(e)) => Answer::Error {
            sqlstate: e
                .code()
                .map_or_else(|| "?????".to_owned(), |c| c.code().to_owned()),
            message: e
                .as_db_error()
                .map_or_else(|| e.to_string(), |db| db.message().to_owned()),
        },
        Ok(Ok(messages)) => Answer::Rows(
            messages
                .iter()
                .filter_map(|m| match m {
                    SimpleQueryMessage::Row(row) => {
                        Some((0..row.len()).map(|i| row.get(i).map(canonical)).collect())
                    }
                    _ => None,
                })
                .collect(),
        ),
    }
}

/// What comparing Zyron's answer with PostgreSQL's found.
#[derive(Debug)]
pub enum Verdict {
    Same,
    BothFailed,
    /// PostgreSQL refuses the statement itself, or fails on a constant
    /// while planning a query Zyron answers with no row; not judged.
    PostgresRefused,
    /// Zyron fails where PostgreSQL answers: a missing feature or a defect.
    ZyronFailed {
        sqlstate: String,
        message: String,
    },
    /// Different rows, or rows where PostgreSQL raised a runtime error.
    Wrong(String),
}

pub fn judge(zyron: &Answer, postgres: &Answer, ordered: bool) -> Verdict {
    match (zyron, postgres) {
        (Answer::Hung, _) => Verdict::Wrong(format!(
            "Zyron gave no answer within {} s",
            QUERY_TIMEOUT.as_secs()
        )),
        (_, Answer::Hung) => Verdict::PostgresRefused,
        (Answer::Error { .. }, Answer::Error { .. }) => Verdict::BothFailed,
        (_, Answer::Error { sqlstate, .. })
            if sqlstate.starts_with("42") || sqlstate.starts_with("0A") =>
        {
            Verdict::PostgresRefused
        }
        (Answer::Rows(rows), Answer::Error { sqlstate, .. })
            if rows.is_empty() && sqlstate.starts_with("22") =>
        {
            Verdict::PostgresRefused
        }
        (Answer::Rows(_), Answer::Error { sqlstate, message }) => Verdict::Wrong(format!(
            "PostgreSQL fails with {sqlstate} ({message}); Zyron answers"
        )),
        (Answer::Error { sqlstate, message }, Answer::Rows(_)) => Verdict::ZyronFailed {
            sqlstate: sqlstate.clone(),
            message: message.clone(),
        },
        (Answer::Rows(ours), Answer::Rows(theirs)) => match same_rows(ours, theirs, ordered) {
            None => Verdict::Same,
            Some(difference) => Verdict::Wrong(difference),
        },
    }
}

/// The first difference between two row sets, or `None`.
pub fn same_rows(ours: &[Row], theirs: &[Row], ordered: bool) -> Option<String> {
    let (mut ours, mut theirs) = (ours.to_vec(), theirs.to_vec());
    if !ordered {
        ours.sort();
        theirs.sort();
    }
    if ours == theirs {
        return None;
    }
    if ours.len() != theirs.len() {
        return Some(format!(
            "{} rows from Zyron, {} from PostgreSQL: {} vs {}",
            ours.len(),
            theirs.len(),
            show(&ours),
            show(&theirs)
        ));
    }
    let index = (0..ours.len()).find(|&i| ours[i] != theirs[i]).unwrap_or(0);
    Some(format!(
        "row {index}: Zyron {:?}, PostgreSQL {:?} (all: {} vs {})",
        ours[index],
        theirs[index],
        show(&ours),
        show(&theirs)
    ))
}

fn show(rows: &[Row]) -> String {
    const SHOWN_ROWS: usize = 12;
    let shown: Vec<String> = rows
        .iter()
        .take(SHOWN_ROWS)
        .map(|row| {
            let cells: Vec<&str> = row.iter().map(|c| c.as_deref().unwrap_or("NULL")).collect();
            format!("({})", cells.join(","))
        })
        .collect();
    let more = if rows.len() > SHOWN_ROWS { ",..." } else { "" };
    format!("[{}{more}]", shown.join(","))
}

/// A cell as compared: integers below 2^53 exactly, other numbers to 12
/// significant digits (an integral one as an integer), anything else as sent.
/// (PostgreSQL's `avg(bigint)` is an exact `numeric`, Zyron's a double.)
pub fn canonical(text: &str) -> String {
    const EXACT_INTEGER_LIMIT: f64 = 9_007_199_254_740_992.0; // 2^53
    if let Ok(integer) = text.parse::<i128>()
        && (integer as f64).abs() < EXACT_INTEGER_LIMIT
    {
        return integer.to_string(); // "-0" is a float's
    }
    let looks_numeric = text
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E'))
        && text.chars().any(|c| c.is_ascii_digit());
    let Some(value) = looks_numeric.then(|| text.parse::<f64>().ok()).flatten() else {
        return match text {
            "Infinity" | "inf" => "Infinity".to_owned(),
            "-Infinity" | "-inf" => "-Infinity".to_owned(),
            _ => text.to_owned(),
        };
    };
    // Rounded to 12 digits first: 21703.999999999996 from a double is
    // PostgreSQL's exact numeric 21704.
    let shown = format!("{value:.11e}");
    let rounded: f64 = shown.parse().unwrap_or(value);
    if rounded.fract() == 0.0 && rounded.abs() < EXACT_INTEGER_LIMIT {
        return format!("{}", rounded as i64);
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_by_value_and_text_as_sent() {
        assert_eq!(canonical("2.0000000000000000"), "2");
        assert_eq!(canonical("2"), "2");
        assert_eq!(
            canonical("1.3333333333333333"),
            canonical("1.33333333333333")
        );
        assert_ne!(canonical("1.5"), canonical("1.25"));
        assert_eq!(canonical("1e+300"), canonical("1e300"));
        assert_eq!(canonical("-0"), "0");
        assert_eq!(canonical("ab"), "ab");
        assert_eq!(canonical("e"), "e");
        assert_eq!(canonical("1234567"), "1234567");
        assert_eq!(canonical("21703.999999999996"), canonical("21704"));
        assert_eq!(
            canonical("-768614336404564651"),
            canonical("-7.68614336404565e17")
        );
    }

    #[test]
    fn unordered_rows_compare_as_multisets() {
        let a = vec![vec![Some("1".into())], vec![None]];
        let b = vec![vec![None], vec![Some("1".into())]];
        assert_eq!(same_rows(&a, &b, false), None);
        assert!(same_rows(&a, &b, true).is_some());
        assert!(same_rows(&a, &a[..1], false).is_some());
    }
}
