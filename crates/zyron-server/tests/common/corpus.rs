//! What the corpus tests (SQL that nobody on the project wrote) share: the
//! list of cases known to fail, checked so that only a new failure fails the
//! test, and the pass rates they publish in the README.
//!
//! A corpus's known failures live in `tests/corpora/<name>.failing`, one case
//! per line with its reason after a tab. `ZYRON_CORPUS_BLESS=1` rewrites the
//! file from the run, after a fix or when the corpus grows.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// How one case of a corpus ended.
#[derive(Debug, Clone)]
pub enum Verdict {
    Pass,
    /// Why it failed, on one line.
    Fail(String),
}

impl Verdict {
    pub fn passed(&self) -> bool {
        matches!(self, Verdict::Pass)
    }
}

/// The cases of one run, in order.
#[derive(Default)]
pub struct Outcomes {
    cases: Vec<(String, Verdict)>,
}

impl Outcomes {
    pub fn record(&mut self, case: String, verdict: Verdict) {
        debug_assert!(!case.contains('\t') && !case.contains('\n'));
        self.cases.push((case, verdict));
    }

    pub fn passed(&self) -> usize {
        self.cases.iter().filter(|(_, v)| v.passed()).count()
    }

    pub fn len(&self) -> usize {
        self.cases.len()
    }

    pub fn failures(&self) -> impl Iterator<Item = (&str, &str)> {
        self.cases
            .iter()
            .filter_map(|(case, verdict)| match verdict {
                Verdict::Fail(why) => Some((case.as_str(), why.as_str())),
                Verdict::Pass => None,
            })
    }
}

fn failing_file(corpus: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpora")
        .join(format!("{corpus}.failing"))
}

fn known_failures(corpus: &str) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(failing_file(corpus)).unwrap_or_default();
    text.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| match line.split_once('\t') {
            Some((case, why)) => (case.to_owned(), why.to_owned()),
            None => (line.to_owned(), String::new()),
        })
        .collect()
}

/// Compares the run with the corpus's known failures: `Err` lists the cases
/// that failed and were not known to; cases that now pass are printed.
/// With `ZYRON_CORPUS_BLESS=1` the known failures become this run's.
pub fn check(corpus: &str, outcomes: &Outcomes) -> Result<(), String> {
    if std::env::var("ZYRON_CORPUS_BLESS").is_ok_and(|v| v == "1") {
        let mut text =
            format!("# {corpus}: cases known to fail, with why; written by ZYRON_CORPUS_BLESS=1\n");
        for (case, why) in outcomes.failures() {
            text.push_str(&format!("{case}\t{}\n", one_line(&stable(why), 300)));
        }
        let file = failing_file(corpus);
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        }
        std::fs::write(&file, text).map_err(|e| e.to_string())?;
        println!("{corpus}: known failures rewritten from this run");
        return Ok(());
    }
    let known = known_failures(corpus);
    let now_failing: BTreeMap<&str, &str> = outcomes.failures().collect();
    let fixed: Vec<&String> = known
        .keys()
        .filter(|case| outcomes.cases.iter().any(|(c, v)| c == *case && v.passed()))
        .collect();
    if !fixed.is_empty() {
        println!(
            "{corpus}: {} cases known to fail now pass (ZYRON_CORPUS_BLESS=1 updates the list): {}",
            fixed.len(),
            fixed
                .iter()
                .map(|c| c.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let (slow, new): (Vec<String>, Vec<String>) = now_failing
        .iter()
        .filter(|(case, _)| !known.contains_key(**case))
        .map(|(case, why)| format!("{case}: {why}"))
        .partition(|failure| is_timeout(failure));
    if !slow.is_empty() {
        // Tests do not assert timings: a case that only ran out of time on a
        // slower or busier machine is reported, not failed.
        println!(
            "{corpus}: {} cases not known to fail ran out of time:\n{}",
            slow.len(),
            slow.join("\n")
        );
    }
    if new.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{corpus}: {} new failures:\n{}",
            new.len(),
            new.join("\n")
        ))
    }
}

/// `why` without DataFusion's spelling suggestion, which changes from run to
/// run (`Did you mean 'x'?` picks among equally close names).
fn stable(why: &str) -> String {
    match why.find(". Did you mean '") {
        Some(at) => {
            let rest = &why[at + 2..];
            let end = rest.find("?").map_or(rest.len(), |q| q + 1);
            format!("{}{}", &why[..at + 1], &rest[end..])
        }
        None => why.to_owned(),
    }
}

/// Whether a failure is a statement that ran out of time (57014, or no reply).
fn is_timeout(failure: &str) -> bool {
    failure.contains("57014")
        || failure.contains("no reply within")
        || failure.contains("no answer within")
}

/// `text` on one line, at most `max_chars` long.
pub fn one_line(text: &str, max_chars: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}...", &flat[..cut]),
        None => flat,
    }
}

/// Writes `markdown` into the README between `<!-- CORPUS:{key}:START -->`
/// and `<!-- CORPUS:{key}:END -->`, so the published pass rates are the last
/// run's.
pub fn publish(key: &str, markdown: &str) -> Result<(), String> {
    let readme = zyron_bench::workspace_root().join("README.md");
    let text = std::fs::read_to_string(&readme).map_err(|e| e.to_string())?;
    let start = format!("<!-- CORPUS:{key}:START -->\n");
    let end = format!("<!-- CORPUS:{key}:END -->");
    let (Some(from), Some(to)) = (text.find(&start), text.find(&end)) else {
        return Err(format!("README.md has no {start} ... {end} section"));
    };
    let updated = format!("{}{start}{}{}", &text[..from], markdown, &text[to..]);
    if updated != text {
        std::fs::write(&readme, updated).map_err(|e| e.to_string())?;
    }
    Ok(())
}
