//! A SeaweedFS that dies while starting is reported at once, with what it
//! logged, after the harness tried fresh servers: not after a minute of
//! refused connections (the shared server's watchdog shell once hid that
//! `weed` had exited).
//!
//! Its own test binary: it points `ZYRON_WEED` at a fake `weed`.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use zyron_bench::seaweedfs::SeaweedFs;

#[test]
fn a_weed_that_exits_is_reported_with_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("weed");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'bind: address already in use' >&2\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    // SAFETY: the only test in this binary; no other thread reads the environment.
    unsafe { std::env::set_var("ZYRON_WEED", &fake) };

    let started = Instant::now();
    let error = SeaweedFs::shared()
        .err()
        .expect("a weed that exits cannot start");
    let elapsed = started.elapsed();

    assert_eq!(
        error.matches("weed exited").count(),
        3,
        "three attempts: {error}"
    );
    assert!(
        error.contains("address already in use"),
        "the log is quoted: {error}"
    );
    assert!(
        elapsed < Duration::from_secs(30),
        "reported after {elapsed:?}, not at timeout"
    );
}
