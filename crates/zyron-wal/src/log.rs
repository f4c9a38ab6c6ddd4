//! The log itself: appends into one in-memory buffer, group commit through a
//! leader, and a background thread that prepares segments ahead and flushes
//! for commits that do not wait.
//!
//! Group commit works without a dedicated writer: a committer that finds no
//! flush in progress becomes the leader, takes *everything* buffered so far,
//! writes it and calls fdatasync once; committers that arrive meanwhile append
//! to a fresh buffer and wait, and one of them leads the next round. So under
//! load one fdatasync covers every commit that arrived during the previous
//! one, and a lone committer pays one write plus one fdatasync, with no
//! handoff to another thread.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use zyron_common::{Result, SqlState, ZyronError};

use crate::record::{self, RECORD_HEADER_BYTES};
use crate::segment::{self, SEGMENT_HEADER_BYTES};

/// How long the background thread waits before preparing a segment again
/// after a failure (a full disk).
const PREPARE_RETRY: Duration = Duration::from_secs(1);

/// Called once a record is durable, or with the error that stopped it.
pub type DurableCallback = Box<dyn FnOnce(Result<()>) + Send>;

/// Limits and timings of one log. Defaults suit a server; tests shrink them.
#[derive(Debug, Clone)]
pub struct WalOptions {
    /// Size of every segment file. Fixed when the log is created.
    pub segment_bytes: u64,
    /// Appenders wait while this much is buffered and not yet written.
    /// It also bounds one write batch, and so the tail a crash can tear.
    pub max_buffer_bytes: usize,
    /// Largest payload one record may carry.
    pub max_record_bytes: usize,
    /// Released segments kept for reuse instead of being deleted.
    pub max_spare_segments: usize,
    /// How often the background thread flushes records nobody waits for.
    pub background_flush_ms: u64,
}

impl Default for WalOptions {
    fn default() -> Self {
        Self {
            segment_bytes: 16 << 20,
            max_buffer_bytes: 1 << 20,
            max_record_bytes: 4 << 20,
            max_spare_segments: 4,
            background_flush_ms: 10,
        }
    }
}

impl WalOptions {
    pub(crate) fn validate(&self) -> Result<()> {
        let fits = RECORD_HEADER_BYTES as u64 + self.max_record_bytes as u64 + SEGMENT_HEADER_BYTES;
        if self.segment_bytes < fits || self.segment_bytes % 4096 != 0 {
            return Err(ZyronError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!(
                    "WAL segment_bytes must be a multiple of 4096 and hold the largest record ({fits} bytes), got {}",
                    self.segment_bytes
                ),
            ));
        }
        Ok(())
    }

    /// How far past the last valid record a crash may have left whole records
    /// of an unfinished batch. Valid records further out mean the log was
    /// damaged, not torn.
    pub(crate) fn torn_window_bytes(&self) -> u64 {
        (self.max_buffer_bytes + self.max_record_bytes + RECORD_HEADER_BYTES) as u64
            + SEGMENT_HEADER_BYTES
    }
}

/// Where one appended record sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub lsn: u64,
    /// Flush to here to make the record durable.
    pub end_lsn: u64,
}

/// Counters for benchmarks and monitoring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    pub records: u64,
    pub fsyncs: u64,
    pub bytes_written: u64,
    pub durable_lsn: u64,
}

/// A write-ahead log open for appending. Cheap to share through `Arc`.
pub struct Wal {
    shared: Arc<Shared>,
    background: Option<JoinHandle<()>>,
}

struct Shared {
    dir: PathBuf,
    options: WalOptions,
    segment_bytes: u64,
    state: Mutex<State>,
    /// Signalled when a flush round ends.
    flushed: Condvar,
    /// Signalled when the buffer is taken, so waiting appenders can go on.
    space: Condvar,
    /// Wakes the background thread.
    wake: Condvar,
    /// Held by the leader while it writes; holds the open segment files.
    files: Mutex<BTreeMap<u64, File>>,
    /// Serialises segment creation so two threads never rename over each other.
    creating: Mutex<()>,
    durable_lsn: AtomicU64,
    records: AtomicU64,
    fsyncs: AtomicU64,
    bytes_written: AtomicU64,
    stop: AtomicBool,
}

struct State {
    buffer: Vec<u8>,
    /// LSN of `buffer[0]`.
    buffer_lsn: u64,
    /// LSN the next record gets (the end of `buffer`).
    next_lsn: u64,
    /// Segments exist, whole and fsynced, up to this LSN.
    prepared_lsn: u64,
    leader_active: bool,
    /// Threads waiting on `Shared::space` and `Shared::flushed`: a leader
    /// signals a condition variable only if someone waits on it, since a
    /// signal costs a futex system call even when no one does (two per
    /// commit, for a lone committer).
    space_waiters: usize,
    flush_waiters: usize,
    /// Set by a failed write or fdatasync: after that the page cache cannot be
    /// trusted, so every later commit fails rather than be acknowledged falsely.
    failed: Option<ZyronError>,
    callbacks: Vec<(u64, DurableCallback)>,
    /// Records appended by committers that do not wait: the background thread flushes them.
    unwaited: bool,
    spare_buffer: Vec<u8>,
}

impl Wal {
    pub(crate) fn start(
        dir: &Path,
        options: WalOptions,
        segment_bytes: u64,
        end_lsn: u64,
        prepared_lsn: u64,
    ) -> Wal {
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            options,
            segment_bytes,
            state: Mutex::new(State {
                buffer: Vec::new(),
                buffer_lsn: end_lsn,
                next_lsn: end_lsn,
                prepared_lsn,
                leader_active: false,
                space_waiters: 0,
                flush_waiters: 0,
                failed: None,
                callbacks: Vec::new(),
                unwaited: false,
                spare_buffer: Vec::new(),
            }),
            flushed: Condvar::new(),
            space: Condvar::new(),
            wake: Condvar::new(),
            files: Mutex::new(BTreeMap::new()),
            creating: Mutex::new(()),
            durable_lsn: AtomicU64::new(end_lsn),
            records: AtomicU64::new(0),
            fsyncs: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let background = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("zyron-wal".into())
                .spawn(move || shared.background_loop())
                .expect("spawning the WAL thread")
        };
        Wal {
            shared,
            background: Some(background),
        }
    }

    /// Appends a record to the buffer. It is not durable until [`Wal::flush`]
    /// (or [`Wal::on_durable`]) covers its `end_lsn`.
    ///
    /// Fails with SQLSTATE 53100 if the disk is too full to prepare the next
    /// segment (nothing is appended then), 54000 if the payload exceeds
    /// `max_record_bytes`, or the error that stopped the log earlier.
    pub fn append(&self, kind: u8, payload: &[u8]) -> Result<Appended> {
        self.shared.append(kind, payload, false)
    }

    /// Appends a record that nobody will wait for (`synchronous_commit = off`):
    /// the background thread makes it durable within `background_flush_ms`.
    pub fn append_unwaited(&self, kind: u8, payload: &[u8]) -> Result<Appended> {
        self.shared.append(kind, payload, true)
    }

    /// Blocks until everything before `lsn` is on disk.
    pub fn flush(&self, lsn: u64) -> Result<()> {
        self.shared.flush(lsn)
    }

    /// Flushes everything before `lsn` on the calling thread if no flush round
    /// is running and no other committer waits for one: a lone committer then
    /// pays one fdatasync and no hand-off to the background thread and back.
    /// `None` when the log is busy: the caller then waits through
    /// [`Wal::on_durable`], so concurrent committers keep sharing rounds.
    pub fn flush_if_idle(&self, lsn: u64) -> Option<Result<()>> {
        self.shared.flush_if_idle(lsn)
    }

    /// Calls `callback` once everything before `lsn` is on disk, from the
    /// background thread (or at once if it already is). For async callers
    /// that must not block a thread on fdatasync.
    pub fn on_durable(&self, lsn: u64, callback: DurableCallback) {
        self.shared.on_durable(lsn, callback)
    }

    /// Appends and waits: one durable record.
    pub fn commit(&self, kind: u8, payload: &[u8]) -> Result<Appended> {
        let appended = self.append(kind, payload)?;
        self.flush(appended.end_lsn)?;
        Ok(appended)
    }

    /// The LSN the next record will get.
    pub fn next_lsn(&self) -> u64 {
        self.shared.lock().next_lsn
    }

    pub fn durable_lsn(&self) -> u64 {
        self.shared.durable_lsn.load(Ordering::Acquire)
    }

    pub fn stats(&self) -> WalStats {
        WalStats {
            records: self.shared.records.load(Ordering::Relaxed),
            fsyncs: self.shared.fsyncs.load(Ordering::Relaxed),
            bytes_written: self.shared.bytes_written.load(Ordering::Relaxed),
            durable_lsn: self.durable_lsn(),
        }
    }

    /// Releases every segment that lies wholly before `redo_lsn`: a checkpoint
    /// has made their records unnecessary. Returns how many were released.
    pub fn truncate_before(&self, redo_lsn: u64) -> Result<usize> {
        let shared = &self.shared;
        assert!(
            redo_lsn <= self.durable_lsn(),
            "a checkpoint cannot be ahead of the durable log"
        );
        let _creating = shared.creating.lock().unwrap_or_else(|p| p.into_inner());
        let mut released = 0;
        for start in segment::list_segments(&shared.dir)? {
            // `>=`: a redo position at a boundary is the end of the earlier
            // segment, which replay opens first.
            if start + shared.segment_bytes >= redo_lsn {
                break;
            }
            shared
                .files
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&start);
            segment::release(&shared.dir, start, shared.options.max_spare_segments)?;
            released += 1;
        }
        if released > 0 {
            segment::sync_dir(&shared.dir)?;
        }
        Ok(released)
    }

    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }
}

impl Drop for Wal {
    /// Flushes what is buffered, then stops the background thread.
    fn drop(&mut self) {
        let next = self.next_lsn();
        let _ = self.flush(next);
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake.notify_all();
        if let Some(handle) = self.background.take() {
            let _ = handle.join();
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn segment_start(&self, lsn: u64) -> u64 {
        lsn - lsn % self.segment_bytes
    }

    fn append(&self, kind: u8, payload: &[u8], unwaited: bool) -> Result<Appended> {
        if payload.len() > self.options.max_record_bytes {
            return Err(ZyronError::new(
                SqlState::PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "WAL record of {} bytes exceeds max_record_bytes ({})",
                    payload.len(),
                    self.options.max_record_bytes
                ),
            ));
        }
        let framed = record::framed_len(payload.len()) as u64;
        let mut state = self.lock();
        loop {
            if let Some(err) = &state.failed {
                return Err(err.clone());
            }
            if !state.buffer.is_empty()
                && state.buffer.len() + framed as usize > self.options.max_buffer_bytes
            {
                // A full buffer is written by whoever finds it full, not left to the timer.
                state = if state.leader_active {
                    state.space_waiters += 1;
                    let mut state = self.space.wait(state).unwrap_or_else(|p| p.into_inner());
                    state.space_waiters -= 1;
                    state
                } else {
                    self.lead_one_round(state)
                };
                continue;
            }
            let lsn = self.placement(state.next_lsn, framed);
            if lsn + framed > state.prepared_lsn {
                drop(state);
                self.prepare_through(lsn + framed)?;
                state = self.lock();
                continue;
            }
            self.pad_to(&mut state, lsn);
            record::encode(&mut state.buffer, lsn, kind, payload);
            state.next_lsn = lsn + framed;
            state.unwaited |= unwaited;
            let prepare_ahead = state.prepared_lsn - state.next_lsn < self.segment_bytes / 2;
            drop(state);
            self.records.fetch_add(1, Ordering::Relaxed);
            if unwaited || prepare_ahead {
                self.wake.notify_one();
            }
            return Ok(Appended {
                lsn,
                end_lsn: lsn + framed,
            });
        }
    }

    /// Where a record of `framed` bytes goes if the log ends at `next`:
    /// records never straddle segments, so one that does not fit starts the
    /// next. A log that ends exactly at a segment boundary (the last record
    /// filled its segment) continues after the next segment's header.
    fn placement(&self, next: u64, framed: u64) -> u64 {
        if next % self.segment_bytes == 0 {
            return next + SEGMENT_HEADER_BYTES;
        }
        let segment_end = self.segment_start(next) + self.segment_bytes;
        if next + framed <= segment_end {
            next
        } else {
            segment_end + SEGMENT_HEADER_BYTES
        }
    }

    /// Fills the buffer up to `lsn` with what the files hold there: zeroes to
    /// the end of the segment, then the next segment's header.
    fn pad_to(&self, state: &mut State, lsn: u64) {
        if lsn == state.next_lsn {
            return;
        }
        let new_segment = lsn - SEGMENT_HEADER_BYTES;
        assert_eq!(
            new_segment % self.segment_bytes,
            0,
            "padding only ever crosses into a new segment"
        );
        let zeros = (new_segment - state.next_lsn) as usize;
        state.buffer.resize(state.buffer.len() + zeros, 0);
        state
            .buffer
            .extend_from_slice(&segment::header(self.segment_bytes, new_segment));
    }

    /// Creates segments until they cover `lsn`.
    fn prepare_through(&self, lsn: u64) -> Result<()> {
        let _creating = self.creating.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let prepared = self.lock().prepared_lsn;
            if prepared >= lsn {
                return Ok(());
            }
            segment::create(&self.dir, self.segment_bytes, prepared)?;
            self.lock().prepared_lsn = prepared + self.segment_bytes;
        }
    }

    fn flush(&self, lsn: u64) -> Result<()> {
        if self.durable_lsn.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        let mut state = self.lock();
        assert!(
            lsn <= state.next_lsn,
            "flush past the end of the log: {lsn} > {}",
            state.next_lsn
        );
        loop {
            if self.durable_lsn.load(Ordering::Acquire) >= lsn {
                return Ok(());
            }
            if let Some(err) = &state.failed {
                return Err(err.clone());
            }
            if state.leader_active {
                state.flush_waiters += 1;
                state = self.flushed.wait(state).unwrap_or_else(|p| p.into_inner());
                state.flush_waiters -= 1;
                continue;
            }
            state = self.lead_one_round(state);
        }
    }

    fn flush_if_idle(&self, lsn: u64) -> Option<Result<()>> {
        if self.durable_lsn.load(Ordering::Acquire) >= lsn {
            return Some(Ok(()));
        }
        let state = self.lock();
        if let Some(err) = &state.failed {
            return Some(Err(err.clone()));
        }
        if state.leader_active || !state.callbacks.is_empty() {
            return None;
        }
        assert!(
            lsn <= state.next_lsn,
            "flush past the end of the log: {lsn} > {}",
            state.next_lsn
        );
        let state = self.lead_one_round(state);
        if self.durable_lsn.load(Ordering::Acquire) >= lsn {
            return Some(Ok(()));
        }
        state.failed.clone().map(Err)
    }

    /// Takes the whole buffer, writes it, fdatasyncs, publishes the new
    /// durable LSN and runs the callbacks it satisfied.
    fn lead_one_round<'a>(&'a self, mut state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        state.leader_active = true;
        state.unwaited = false;
        let start = state.buffer_lsn;
        let end = state.next_lsn;
        let spare = std::mem::take(&mut state.spare_buffer);
        let mut batch = std::mem::replace(&mut state.buffer, spare);
        state.buffer_lsn = end;
        let space_awaited = state.space_waiters > 0;
        drop(state);
        if space_awaited {
            self.space.notify_all();
        }

        let result = self.write_batch(start, &batch);
        batch.clear();

        let mut state = self.lock();
        state.leader_active = false;
        state.spare_buffer = batch;
        match result {
            Ok(()) => self.durable_lsn.store(end, Ordering::Release),
            Err(err) => state.failed = Some(err),
        }
        let ready = self.take_ready_callbacks(&mut state);
        let more_owed = !state.callbacks.is_empty() || state.unwaited;
        let flush_awaited = state.flush_waiters > 0;
        // An appender that found the buffer full while this round ran waits
        // for the round to end: it leads the next one, or sees the failure.
        let space_awaited = state.space_waiters > 0;
        drop(state);
        if flush_awaited {
            self.flushed.notify_all();
        }
        if space_awaited {
            self.space.notify_all();
        }
        if more_owed {
            self.wake.notify_one();
        }
        self.run_callbacks(ready);
        self.lock()
    }

    fn take_ready_callbacks(&self, state: &mut State) -> Vec<(Result<()>, DurableCallback)> {
        let durable = self.durable_lsn.load(Ordering::Acquire);
        let failed = state.failed.clone();
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut state.callbacks)
            .into_iter()
            .partition(|(lsn, _)| *lsn <= durable || failed.is_some());
        state.callbacks = waiting;
        ready
            .into_iter()
            .map(|(lsn, callback)| match &failed {
                Some(err) if lsn > durable => (Err(err.clone()), callback),
                _ => (Ok(()), callback),
            })
            .collect()
    }

    fn run_callbacks(&self, ready: Vec<(Result<()>, DurableCallback)>) {
        for (result, callback) in ready {
            callback(result);
        }
    }

    fn write_batch(&self, start: u64, batch: &[u8]) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        #[cfg(test)]
        if let Some(fault) = tests::WRITE_FAULT.with(|f| f.borrow_mut().take()) {
            fault().map_err(|e| ZyronError::io("writing the WAL", &e))?;
        }
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        let mut touched = Vec::with_capacity(2);
        let mut lsn = start;
        let mut written = 0usize;
        while written < batch.len() {
            let segment_start = self.segment_start(lsn);
            let room = (segment_start + self.segment_bytes - lsn) as usize;
            let piece = &batch[written..written + room.min(batch.len() - written)];
            let file = self.segment_file(&mut files, segment_start)?;
            file.write_all_at(piece, lsn - segment_start)
                .map_err(|e| ZyronError::io("writing the WAL", &e))?;
            touched.push(segment_start);
            lsn += piece.len() as u64;
            written += piece.len();
        }
        for segment_start in &touched {
            files[segment_start]
                .sync_data()
                .map_err(|e| ZyronError::io("fdatasync of the WAL", &e))?;
            self.fsyncs.fetch_add(1, Ordering::Relaxed);
        }
        self.bytes_written
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let current = *touched.last().expect("a non-empty batch touches a segment");
        files.retain(|&start, _| start >= current);
        Ok(())
    }

    fn segment_file<'f>(
        &self,
        files: &'f mut BTreeMap<u64, File>,
        segment_start: u64,
    ) -> Result<&'f File> {
        if !files.contains_key(&segment_start) {
            let file = segment::open_for_write(&segment::segment_path(&self.dir, segment_start))?;
            files.insert(segment_start, file);
        }
        Ok(&files[&segment_start])
    }

    fn on_durable(&self, lsn: u64, callback: DurableCallback) {
        let mut state = self.lock();
        if let Some(err) = state.failed.clone() {
            drop(state);
            return callback(Err(err));
        }
        if self.durable_lsn.load(Ordering::Acquire) >= lsn {
            drop(state);
            return callback(Ok(()));
        }
        state.callbacks.push((lsn, callback));
        drop(state);
        self.wake.notify_one();
    }

    /// Prepares the next segment before anyone waits for it, and flushes
    /// records that nobody waits on.
    fn background_loop(self: Arc<Self>) {
        let period = Duration::from_millis(self.options.background_flush_ms.max(1));
        let mut next_prepare = Instant::now();
        let mut state = self.lock();
        while !self.stop.load(Ordering::Acquire) {
            // Flushing what is owed comes first: a failing segment preparation
            // (a full disk) must never keep a durable commit waiting.
            let owed = state.unwaited || !state.callbacks.is_empty();
            if owed
                && !state.leader_active
                && state.failed.is_none()
                && state.next_lsn > state.buffer_lsn
            {
                state = self.lead_one_round(state);
                continue;
            }
            if state.failed.is_none()
                && state.prepared_lsn - state.next_lsn < self.segment_bytes / 2
                && Instant::now() >= next_prepare
            {
                let target = state.prepared_lsn + 1;
                drop(state);
                // A failure is reported to the appender that needs the segment;
                // this thread retries later, never holding the creation lock for long.
                if self.prepare_through(target).is_err() {
                    next_prepare = Instant::now() + PREPARE_RETRY;
                }
                state = self.lock();
                continue;
            }
            if state.failed.is_some() {
                let ready = self.take_ready_callbacks(&mut state);
                drop(state);
                self.run_callbacks(ready);
                state = self.lock();
            }
            state = self
                .wake
                .wait_timeout(state, period)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            if !state.buffer.is_empty() && !state.leader_active && state.failed.is_none() {
                state.unwaited = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::sync::mpsc;

    use super::*;

    type Fault = Box<dyn FnOnce() -> std::io::Result<()>>;

    thread_local! {
        /// A failing disk for the tests: when set, this thread's next WAL
        /// write runs it instead of writing, and fails with its error.
        pub(super) static WRITE_FAULT: RefCell<Option<Fault>> = const { RefCell::new(None) };
    }

    const WAIT_LIMIT: Duration = Duration::from_secs(30);

    /// Waits until `condition` holds, failing the test past [`WAIT_LIMIT`].
    fn wait_for(what: &str, condition: impl Fn() -> bool) {
        let deadline = Instant::now() + WAIT_LIMIT;
        while !condition() {
            assert!(
                Instant::now() < deadline,
                "{what}: not reached in {WAIT_LIMIT:?}"
            );
            std::thread::yield_now();
        }
    }

    /// An appender that finds the buffer full while a round is being written
    /// waits for that round. If the round's write fails, the appender must
    /// wake and get the error: before 2157ba9 it was woken only when the
    /// round began, so one that started waiting later waited forever.
    #[test]
    fn a_failed_round_wakes_appenders_waiting_for_space() {
        let dir = tempfile::tempdir().unwrap();
        let options = WalOptions {
            segment_bytes: 64 << 10,
            max_buffer_bytes: 4 << 10,
            max_record_bytes: 4 << 10,
            max_spare_segments: 1,
            background_flush_ms: 5,
        };
        let (wal, _) = crate::open(dir.path(), options, 0, |_| Ok(())).unwrap();
        let wal = Arc::new(wal);

        // The leader's write blocks until released, then fails.
        let (release, gate) = mpsc::channel::<()>();
        let leader = {
            let wal = wal.clone();
            std::thread::spawn(move || {
                let fault: Fault = Box::new(move || {
                    gate.recv().expect("the test releases the write");
                    Err(std::io::Error::other("injected write failure"))
                });
                WRITE_FAULT.with(|f| *f.borrow_mut() = Some(fault));
                let appended = wal.append(1, &[1; 100]).unwrap();
                wal.flush(appended.end_lsn)
            })
        };
        wait_for("the leader's round", || wal.shared.lock().leader_active);

        let (done, appended) = mpsc::channel();
        let appender = {
            let wal = wal.clone();
            std::thread::spawn(move || {
                // The first fits in the buffer the round left empty; the second finds it full.
                let first = wal.append(1, &[2; 3000]);
                let second = wal.append(1, &[3; 3000]);
                done.send((first.is_ok(), second)).unwrap();
            })
        };
        wait_for("an appender waiting for space", || {
            wal.shared.lock().space_waiters == 1
        });
        release.send(()).unwrap();

        let flushed = leader.join().unwrap();
        assert!(
            flushed
                .unwrap_err()
                .to_string()
                .contains("injected write failure")
        );
        let (first_ok, second) = appended
            .recv_timeout(WAIT_LIMIT)
            .expect("the appender waiting for space was never woken");
        assert!(first_ok);
        let err = second.expect_err("an append after a failed write must fail");
        assert_eq!(err.sqlstate(), SqlState::IO_ERROR);
        assert!(err.to_string().contains("injected write failure"), "{err}");
        appender.join().unwrap();
    }
}
