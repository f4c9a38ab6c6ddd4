//! Reads a psql script as psql does: statements end at a `;` outside quotes,
//! comments and parentheses; a backslash starts a meta-command that runs to
//! the end of its line; `COPY ... FROM stdin` is followed by data lines up to
//! `\.`; `:name`, `:'name'` and `:"name"` are replaced by psql variables
//! (`\set`, `\getenv`), and left as written when the variable is not set.

use std::collections::HashMap;
use std::path::Path;

/// One thing the script asks for, with the line it starts on.
#[derive(Debug, PartialEq)]
pub enum Item {
    Statement {
        line: usize,
        sql: String,
        /// The rows a `COPY ... FROM stdin` sends, or a file it names read by
        /// the client, as psql's `\copy` would.
        copy_data: Option<String>,
    },
    /// A meta-command this reader does not carry out (`\d`, `\pset`, ...).
    Meta { line: usize, text: String },
}

/// Splits `script`; `env` answers `\getenv`, and `base` resolves the data
/// files that `COPY ... FROM 'file'` names.
pub fn split(script: &str, env: &HashMap<String, String>, base: &Path) -> Vec<Item> {
    let mut reader = Reader {
        variables: HashMap::new(),
        env,
        base,
        items: Vec::new(),
    };
    reader.read(script);
    reader.items
}

struct Reader<'a> {
    variables: HashMap<String, String>,
    env: &'a HashMap<String, String>,
    base: &'a Path,
    items: Vec<Item>,
}

#[derive(Clone, Copy, PartialEq)]
enum Quote {
    None,
    Single { backslash_escapes: bool },
    Double,
    BlockComment(usize),
    Dollar,
}

/// The script as characters, read front to back with the line number kept.
struct Cursor {
    chars: Vec<char>,
    at: usize,
    line: usize,
}

impl Cursor {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek(0)?;
        self.at += 1;
        if c == '\n' {
            self.line += 1;
        }
        Some(c)
    }

    /// The rest of the current line, without its newline, which is consumed.
    fn rest_of_line(&mut self) -> String {
        let mut text = String::new();
        while let Some(c) = self.bump() {
            if c == '\n' {
                break;
            }
            text.push(c);
        }
        text
    }

    fn starts_with(&self, text: &str) -> bool {
        text.chars()
            .enumerate()
            .all(|(i, c)| self.peek(i) == Some(c))
    }
}

impl Reader<'_> {
    fn read(&mut self, script: &str) {
        let mut cursor = Cursor {
            chars: script.chars().collect(),
            at: 0,
            line: 1,
        };
        let mut buffer = String::new();
        let mut start_line = 1;
        let mut quote = Quote::None;
        let mut dollar_tag = String::new();
        let mut depth = 0usize;
        while let Some(c) = cursor.peek(0) {
            match quote {
                Quote::Dollar => {
                    if cursor.starts_with(&dollar_tag) {
                        for _ in 0..dollar_tag.chars().count() {
                            buffer.push(cursor.bump().expect("tag"));
                        }
                        quote = Quote::None;
                    } else {
                        buffer.push(cursor.bump().expect("char"));
                    }
                    continue;
                }
                Quote::Single { backslash_escapes } => {
                    buffer.push(cursor.bump().expect("char"));
                    if backslash_escapes && c == '\\' {
                        if let Some(escaped) = cursor.bump() {
                            buffer.push(escaped);
                        }
                    } else if c == '\'' {
                        if cursor.peek(0) == Some('\'') {
                            buffer.push(cursor.bump().expect("quote"));
                        } else {
                            quote = Quote::None;
                        }
                    }
                    continue;
                }
                Quote::Double => {
                    buffer.push(cursor.bump().expect("char"));
                    if c == '"' {
                        quote = Quote::None;
                    }
                    continue;
                }
                Quote::BlockComment(level) => {
                    if cursor.starts_with("*/") {
                        buffer.push_str("*/");
                        cursor.at += 2;
                        quote = match level {
                            1 => Quote::None,
                            _ => Quote::BlockComment(level - 1),
                        };
                    } else if cursor.starts_with("/*") {
                        buffer.push_str("/*");
                        cursor.at += 2;
                        quote = Quote::BlockComment(level + 1);
                    } else {
                        buffer.push(cursor.bump().expect("char"));
                    }
                    continue;
                }
                Quote::None => {}
            }
            if buffer.trim().is_empty() && !c.is_whitespace() {
                buffer.clear();
                start_line = cursor.line;
            }
            match c {
                '-' if cursor.peek(1) == Some('-') => {
                    // A comment to the end of the line is not sent.
                    cursor.rest_of_line();
                    push_newline(&mut buffer);
                }
                '\n' => {
                    cursor.bump();
                    push_newline(&mut buffer);
                }
                '/' if cursor.peek(1) == Some('*') => {
                    buffer.push_str("/*");
                    cursor.at += 2;
                    quote = Quote::BlockComment(1);
                }
                '\'' => {
                    let before: Vec<char> = buffer.chars().rev().take(2).collect();
                    let backslash_escapes = matches!(before.first(), Some('e' | 'E'))
                        && !before
                            .get(1)
                            .is_some_and(|c| c.is_alphanumeric() || *c == '_');
                    quote = Quote::Single { backslash_escapes };
                    buffer.push(cursor.bump().expect("quote"));
                }
                '"' => {
                    quote = Quote::Double;
                    buffer.push(cursor.bump().expect("quote"));
                }
                '$' => match dollar_quote_tag(&buffer, &cursor) {
                    Some(tag) => {
                        buffer.push_str(&tag);
                        cursor.at += tag.chars().count();
                        dollar_tag = tag;
                        quote = Quote::Dollar;
                    }
                    None => buffer.push(cursor.bump().expect("dollar")),
                },
                ':' => {
                    let text = self.substitute(&mut cursor);
                    buffer.push_str(&text);
                }
                '(' | ')' => {
                    depth = if c == '(' {
                        depth + 1
                    } else {
                        depth.saturating_sub(1)
                    };
                    buffer.push(cursor.bump().expect("paren"));
                }
                ';' if depth == 0 => {
                    cursor.bump();
                    buffer.push(';');
                    self.finish(&mut buffer, start_line, &mut cursor);
                }
                '\\' if cursor.peek(1) == Some(';') => {
                    // psql's `\;`: a semicolon that does not end the query.
                    cursor.at += 2;
                    buffer.push(';');
                }
                '\\' => {
                    let line = cursor.line;
                    let meta = cursor.rest_of_line();
                    if meta.starts_with("\\g") && !buffer.trim().is_empty() {
                        self.finish(&mut buffer, start_line, &mut cursor);
                    } else {
                        self.meta(meta.trim_end(), line);
                    }
                    push_newline(&mut buffer);
                }
                _ => buffer.push(cursor.bump().expect("char")),
            }
        }
        if !buffer.trim().is_empty() && !only_comments(&buffer) {
            self.items.push(Item::Statement {
                line: start_line,
                sql: buffer.trim().to_owned(),
                copy_data: None,
            });
        }
    }

    /// Ends the statement in `buffer`; a COPY from the client takes the data
    /// lines after it (from the next line up to `\.`).
    fn finish(&mut self, buffer: &mut String, line: usize, cursor: &mut Cursor) {
        let sql = std::mem::take(buffer).trim().to_owned();
        if only_comments(&sql) {
            return;
        }
        let lower = sql.to_ascii_lowercase();
        let copy_data = if is_copy_from(&lower, "stdin") || is_copy_from(&lower, "stdout") {
            cursor.rest_of_line();
            let mut data = String::new();
            while cursor.peek(0).is_some() {
                let line = cursor.rest_of_line();
                if line == "\\." {
                    break;
                }
                data.push_str(&line);
                data.push('\n');
            }
            Some(data)
        } else {
            None
        };
        let (sql, copy_data) = match (copy_data, copy_file(&sql, &lower)) {
            (None, Some((statement, file))) => match std::fs::read_to_string(self.base.join(&file))
            {
                Ok(data) => (statement, Some(data)),
                // Sent as written: both servers refuse it alike.
                Err(_) => (sql, None),
            },
            (data, _) => (sql, data),
        };
        self.items.push(Item::Statement {
            line,
            sql,
            copy_data,
        });
    }

    fn meta(&mut self, text: &str, line: usize) {
        let mut words = self.meta_words(text).into_iter();
        match words.next().as_deref() {
            Some("\\set") => {
                if let Some(name) = words.next() {
                    let value: String = words.collect();
                    self.variables.insert(name, value);
                }
            }
            Some("\\unset") => {
                if let Some(name) = words.next() {
                    self.variables.remove(&name);
                }
            }
            Some("\\getenv") => {
                if let (Some(name), Some(env)) = (words.next(), words.next()) {
                    let value = self.env.get(&env).cloned().unwrap_or_default();
                    self.variables.insert(name, value);
                }
            }
            _ => self.items.push(Item::Meta {
                line,
                text: text.to_owned(),
            }),
        }
    }

    /// A meta-command's words as psql reads them: `'quoted'` text with `''`
    /// for a quote, and `:variable` replaced by its value.
    fn meta_words(&self, text: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut chars = text.chars().peekable();
        loop {
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            if chars.peek().is_none() {
                return words;
            }
            let mut word = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                chars.next();
                match c {
                    '\'' => {
                        while let Some(q) = chars.next() {
                            if q == '\'' {
                                if chars.next_if_eq(&'\'').is_none() {
                                    break;
                                }
                            }
                            word.push(q);
                        }
                    }
                    ':' => {
                        let name: String = std::iter::from_fn(|| {
                            chars.next_if(|c| c.is_alphanumeric() || *c == '_')
                        })
                        .collect();
                        word.push_str(&self.variables.get(&name).cloned().unwrap_or_default());
                    }
                    _ => word.push(c),
                }
            }
            words.push(word);
        }
    }

    /// The text for the `:` at the cursor, which is moved past what it used.
    fn substitute(&self, cursor: &mut Cursor) -> String {
        if cursor.peek(1) == Some(':') {
            cursor.at += 2;
            return "::".to_owned();
        }
        let (open, skip) = match cursor.peek(1) {
            Some(q @ ('\'' | '"')) => (Some(q), 2),
            _ => (None, 1),
        };
        let name: String = cursor.chars[cursor.at + skip..]
            .iter()
            .take_while(|c| c.is_alphanumeric() || **c == '_')
            .collect();
        let length = name.chars().count();
        let closes = open.is_none_or(|q| cursor.peek(skip + length) == Some(q));
        let Some(value) = self.variables.get(&name).filter(|_| length > 0 && closes) else {
            cursor.at += 1;
            return ":".to_owned();
        };
        cursor.at += skip + length + usize::from(open.is_some());
        match open {
            Some('\'') => format!("'{}'", value.replace('\'', "''")),
            Some(_) => format!("\"{}\"", value.replace('"', "\"\"")),
            None => value.clone(),
        }
    }
}

fn push_newline(buffer: &mut String) {
    if !buffer.trim().is_empty() {
        let trimmed = buffer.trim_end_matches([' ', '\t']).len();
        buffer.truncate(trimmed);
        buffer.push('\n');
    }
}

/// Whether `sql` holds nothing but block comments.
fn only_comments(sql: &str) -> bool {
    let mut rest = sql.trim();
    while let Some(after) = rest.strip_prefix("/*") {
        match after.find("*/") {
            Some(end) => rest = after[end + 2..].trim(),
            None => return false,
        }
    }
    rest.is_empty() || rest == ";"
}

/// `$tag$` at the cursor, if that opens a dollar quote (not `$1`, not `a$b`).
fn dollar_quote_tag(buffer: &str, cursor: &Cursor) -> Option<String> {
    if buffer
        .chars()
        .next_back()
        .is_some_and(|c| c.is_alphanumeric() || c == '_')
    {
        return None;
    }
    let mut tag = String::from("$");
    for ahead in 1.. {
        let c = cursor.peek(ahead)?;
        if c == '$' {
            tag.push('$');
            return Some(tag);
        }
        if !(c.is_alphanumeric() || c == '_') || (c.is_ascii_digit() && ahead == 1) {
            return None;
        }
        tag.push(c);
    }
    None
}

fn is_copy_from(lower: &str, source: &str) -> bool {
    lower.starts_with("copy ")
        && lower
            .split_whitespace()
            .collect::<Vec<_>>()
            .windows(2)
            .any(|w| w[0] == "from" && w[1].trim_end_matches(';') == source)
}

/// `COPY t FROM 'file'` as `COPY t FROM stdin` and the file it names.
fn copy_file(sql: &str, lower: &str) -> Option<(String, String)> {
    if !lower.starts_with("copy ") {
        return None;
    }
    let from = lower.find(" from '")?;
    let rest = &sql[from + " from '".len()..];
    let end = rest.find('\'')?;
    let file = rest[..end].to_owned();
    let statement = format!("{} FROM stdin{}", &sql[..from], &rest[end + 1..]);
    Some((statement, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statements(script: &str) -> Vec<(usize, String)> {
        split(script, &HashMap::new(), Path::new("/"))
            .into_iter()
            .filter_map(|item| match item {
                Item::Statement { line, sql, .. } => Some((line, sql)),
                Item::Meta { .. } => None,
            })
            .collect()
    }

    #[test]
    fn statements_end_at_semicolons_outside_quotes_and_parentheses() {
        let script = "-- a comment\nSELECT 'a;b', \"c;\" -- x;\n  FROM t;\nCREATE RULE r AS ON INSERT TO t DO (SELECT 1; SELECT 2);\nSELECT $$;$$; SELECT E'\\';';\n/* ; */ SELECT 3;";
        let found = statements(script);
        assert_eq!(found[0], (2, "SELECT 'a;b', \"c;\"\n  FROM t;".to_owned()));
        assert!(found[1].1.ends_with("SELECT 2);"));
        assert_eq!(found[2], (5, "SELECT $$;$$;".to_owned()));
        assert_eq!(found[3], (5, "SELECT E'\\';';".to_owned()));
        assert_eq!(found[4].1, "/* ; */ SELECT 3;");
        assert_eq!(found.len(), 5);
    }

    #[test]
    fn copy_from_stdin_takes_its_data_and_meta_commands_are_items() {
        let script = "COPY t FROM stdin;\n1\ta\n2\tb\n\\.\n\\d t\nSELECT 1 \\gset\nSELECT 2;";
        let items = split(script, &HashMap::new(), Path::new("/"));
        assert_eq!(
            items[0],
            Item::Statement {
                line: 1,
                sql: "COPY t FROM stdin;".to_owned(),
                copy_data: Some("1\ta\n2\tb\n".to_owned())
            }
        );
        assert_eq!(
            items[1],
            Item::Meta {
                line: 5,
                text: "\\d t".to_owned()
            }
        );
        assert!(matches!(&items[2], Item::Statement { sql, line: 6, .. } if sql == "SELECT 1"));
        assert!(matches!(&items[3], Item::Statement { sql, line: 7, .. } if sql == "SELECT 2;"));
    }

    #[test]
    fn a_backslash_semicolon_does_not_end_the_query_and_set_values_are_unquoted() {
        let script = "SELECT 1\\; SELECT 2;\n\\set q 'it''s a b' :x\nSELECT :'q';";
        let found = statements(script);
        assert_eq!(found[0], (1, "SELECT 1; SELECT 2;".to_owned()));
        assert_eq!(found[1], (3, "SELECT 'it''s a b';".to_owned()));
    }

    #[test]
    fn variables_are_substituted_and_copy_from_a_file_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        std::fs::write(dir.path().join("data/x.data"), "7\n").unwrap();
        let env = HashMap::from([("SRC".to_owned(), dir.path().display().to_string())]);
        let script = "\\getenv abs_srcdir SRC\n\\set filename :abs_srcdir '/data/x.data'\nCOPY x FROM :'filename';\n\\set n 3\nSELECT :n, ':n', 1::int, :undefined;";
        let items = split(script, &env, Path::new("/"));
        assert_eq!(
            items[0],
            Item::Statement {
                line: 3,
                sql: "COPY x FROM stdin;".to_owned(),
                copy_data: Some("7\n".to_owned())
            }
        );
        assert!(
            matches!(&items[1], Item::Statement { sql, .. } if sql == "SELECT 3, ':n', 1::int, :undefined;")
        );
    }
}
