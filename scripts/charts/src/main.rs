//! `charts`: turns the newest full benchmark results into SVG charts and the
//! README's benchmark section. Every published figure passes through here;
//! nothing is typed by hand. Running it twice on the same files changes nothing.
//!
//! Usage: `cargo run --release -p zyron-charts [-- --root DIR]`

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use plotters::prelude::*;
use zyron_bench::{Metric, SuiteResult};

const START: &str = "<!-- BENCH:START -->";
const END: &str = "<!-- BENCH:END -->";
/// Folders under `benchmarks/` that hold no results.
const NOT_SUITES: [&str; 2] = ["charts", "queries"];

fn main() -> ExitCode {
    let root = match parse_root() {
        Ok(root) => root,
        Err(e) => {
            eprintln!("charts: {e}");
            return ExitCode::FAILURE;
        }
    };
    match run(&root) {
        Ok(written) => {
            for path in written {
                println!("wrote {}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("charts: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse_root() -> Result<PathBuf, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(zyron_bench::workspace_root()),
        [flag, dir] if flag == "--root" => Ok(PathBuf::from(dir)),
        [flag] if flag == "--help" || flag == "-h" => {
            println!(
                "charts [--root DIR]\n\nReads the newest full result of each suite under DIR/benchmarks/<suite>/,\n\
                 writes DIR/benchmarks/charts/*.svg and rewrites DIR/README.md between\n{START} and {END}."
            );
            std::process::exit(0);
        }
        other => Err(format!("unexpected arguments {other:?}; see --help")),
    }
}

fn run(root: &Path) -> Result<Vec<PathBuf>, String> {
    let suites = newest_full_results(&root.join("benchmarks"))?;
    let chart_dir = root.join("benchmarks").join("charts");
    std::fs::create_dir_all(&chart_dir).map_err(|e| format!("{}: {e}", chart_dir.display()))?;
    let mut written = Vec::new();
    let mut section = String::new();
    if suites.is_empty() {
        section.push_str("No full benchmark run has been committed yet.\n");
    }
    for result in &suites {
        let charts = write_charts(result, &chart_dir)?;
        section.push_str(&suite_section(result, &charts));
        written.extend(charts.into_iter().map(|name| chart_dir.join(name)));
    }
    let readme = root.join("README.md");
    rewrite_readme(&readme, &section)?;
    written.push(readme);
    Ok(written)
}

/// The newest `"scale": "full"` result of each suite, by suite name.
fn newest_full_results(benchmarks: &Path) -> Result<Vec<SuiteResult>, String> {
    let mut newest: BTreeMap<String, SuiteResult> = BTreeMap::new();
    let entries =
        std::fs::read_dir(benchmarks).map_err(|e| format!("{}: {e}", benchmarks.display()))?;
    for suite_dir in entries.flatten() {
        let name = suite_dir.file_name().to_string_lossy().into_owned();
        if NOT_SUITES.contains(&name.as_str()) || !suite_dir.path().is_dir() {
            continue;
        }
        for file in std::fs::read_dir(suite_dir.path())
            .map_err(|e| e.to_string())?
            .flatten()
        {
            let path = file.path();
            if path.extension().is_none_or(|ext| ext != "json") {
                continue;
            }
            let result = SuiteResult::read(&path)?;
            if result.scale != "full" {
                continue;
            }
            let keep = newest
                .get(&result.suite)
                .is_none_or(|current| current.timestamp < result.timestamp);
            if keep {
                newest.insert(result.suite.clone(), result);
            }
        }
    }
    Ok(newest.into_values().collect())
}

/// One grouped bar chart per unit: Zyron next to its peer for every metric in that unit.
fn write_charts(result: &SuiteResult, dir: &Path) -> Result<Vec<String>, String> {
    let mut by_unit: BTreeMap<&str, Vec<&Metric>> = BTreeMap::new();
    for metric in &result.results {
        by_unit
            .entry(metric.unit.as_str())
            .or_default()
            .push(metric);
    }
    let mut names = Vec::new();
    for (unit, metrics) in by_unit {
        let name = format!("{}_{}.svg", result.suite, slug(unit));
        draw_bars(result, unit, &metrics, &dir.join(&name)).map_err(|e| format!("{name}: {e}"))?;
        names.push(name);
    }
    Ok(names)
}

fn slug(unit: &str) -> String {
    unit.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

fn draw_bars(
    result: &SuiteResult,
    unit: &str,
    metrics: &[&Metric],
    path: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    // One legend entry for the peers: their name when every metric has the same one, else a
    // pointer to the table, which names each metric's peer.
    let mut peers: Vec<&str> = metrics
        .iter()
        .filter_map(|m| m.peer.as_ref())
        .map(|p| p.system.as_str())
        .collect();
    peers.sort_unstable();
    peers.dedup();
    let peer_name = match peers.as_slice() {
        [] => None,
        [one] => Some(one.to_string()),
        _ => Some("peer (each metric's peer is named in the table)".to_string()),
    };
    let rows = metrics.len();
    let height = (120 + rows * 34) as u32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let max = metrics
        .iter()
        .map(|m| m.value.max(m.peer.as_ref().map_or(0.0, |p| p.value)))
        .fold(0.0_f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let title = format!(
        "{} ({}, {} is better)",
        result.suite,
        unit,
        if metrics[0].higher_is_better {
            "higher"
        } else {
            "lower"
        }
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(200)
        .build_cartesian_2d(0.0..max * 1.5, (0..rows).into_segmented())?;
    let labels: Vec<String> = metrics.iter().map(|m| m.name.clone()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows)
        .y_label_formatter(&|y| match y {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .x_desc(unit)
        .draw()?;
    let ours = RGBColor(0x1f, 0x77, 0xb4);
    let theirs = RGBColor(0xff, 0x7f, 0x0e);
    chart
        .draw_series(metrics.iter().enumerate().map(|(i, m)| {
            Rectangle::new(
                [
                    (0.0, SegmentValue::Exact(i)),
                    (m.value, SegmentValue::CenterOf(i)),
                ],
                ours.filled(),
            )
        }))?
        .label("Zyron")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], ours.filled()));
    if let Some(peer_name) = peer_name {
        chart
            .draw_series(metrics.iter().enumerate().filter_map(|(i, m)| {
                m.peer.as_ref().map(|p| {
                    Rectangle::new(
                        [
                            (0.0, SegmentValue::CenterOf(i)),
                            (p.value, SegmentValue::Exact(i + 1)),
                        ],
                        theirs.filled(),
                    )
                })
            }))?
            .label(peer_name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], theirs.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

fn suite_section(result: &SuiteResult, charts: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### `{}`\n\n{} on {} ({} cores, {} GB), commit `{}`{}, {} build.\n",
        result.suite,
        result.timestamp,
        result.machine.cpu,
        result.machine.cores,
        result.machine.memory_gb,
        result.git_sha,
        if result.git_dirty {
            " (with uncommitted changes)"
        } else {
            ""
        },
        result.build.profile
    );
    let _ = writeln!(
        out,
        "| metric | Zyron (p50) | spread (min / p95 / max, n) | peer | peer value | Zyron ahead by |"
    );
    let _ = writeln!(out, "|---|---:|---|---|---:|---:|");
    for m in &result.results {
        let (peer, peer_value, ratio) = match &m.peer {
            Some(p) => (
                p.system.clone(),
                format!("{} {}", number(p.value), m.unit),
                format!("{:.2}x", p.ratio),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        let _ = writeln!(
            out,
            "| {} | {} {} | {} / {} / {}, {} | {} | {} | {} |",
            m.name,
            number(m.value),
            m.unit,
            number(m.min),
            number(m.p95),
            number(m.max),
            m.samples,
            peer,
            peer_value,
            ratio
        );
    }
    for reason in &result.skipped {
        let _ = writeln!(out, "\nSkipped: {reason}");
    }
    out.push('\n');
    for chart in charts {
        let _ = writeln!(out, "![{chart}](benchmarks/charts/{chart})\n");
    }
    out
}

/// Three significant digits, without exponent notation for ordinary values.
fn number(value: f64) -> String {
    if value == 0.0 {
        return "0".into();
    }
    let digits = (3 - value.abs().log10().floor() as i32 - 1).max(0) as usize;
    format!("{value:.digits$}")
}

fn rewrite_readme(path: &Path, section: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (Some(start), Some(end)) = (text.find(START), text.find(END)) else {
        return Err(format!(
            "{} has no {START} ... {END} markers",
            path.display()
        ));
    };
    if end < start {
        return Err(format!("{END} comes before {START} in {}", path.display()));
    }
    let updated = format!("{}{START}\n{section}{}", &text[..start], &text[end..]);
    if updated != text {
        std::fs::write(path, updated).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_have_three_significant_digits() {
        assert_eq!(number(1234.5), "1234");
        assert_eq!(number(12.345), "12.3");
        assert_eq!(number(0.012345), "0.0123");
    }

    #[test]
    fn readme_rewrite_replaces_only_the_marked_section_and_is_idempotent() {
        let dir = tempfile_dir();
        let readme = dir.join("README.md");
        std::fs::write(&readme, format!("intro\n{START}\nold\n{END}\noutro\n")).unwrap();
        rewrite_readme(&readme, "new\n").unwrap();
        let once = std::fs::read_to_string(&readme).unwrap();
        assert_eq!(once, format!("intro\n{START}\nnew\n{END}\noutro\n"));
        rewrite_readme(&readme, "new\n").unwrap();
        assert_eq!(std::fs::read_to_string(&readme).unwrap(), once);
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("zyron-charts-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
