//! The transaction manager: ids, snapshots, commit ordering, lock waits and
//! the garbage-collection horizon.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use futures_channel::oneshot;
use zyron_common::hlc::Hlc;
use zyron_common::{Result, SqlState, ZyronError};

use crate::{Snapshot, TxnId};

/// A commit timestamp handed out in commit order. The caller appends its WAL
/// record *while* holding the manager's order (see [`TxnManager::commit_in_order`]),
/// so timestamp order is log order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitTicket {
    pub ts: u64,
    /// Where the commit's WAL record starts.
    pub lsn: u64,
}

/// How a lock wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOutcome {
    /// The other transaction ended (committed or rolled back): read the row again.
    Ended,
}

pub struct TxnManager {
    clock: Hlc,
    next_txn: AtomicU64,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Open transactions and the oldest snapshot each still reads from.
    active: HashMap<TxnId, u64>,
    /// How many open transactions read from each snapshot timestamp.
    snapshot_counts: BTreeMap<u64, usize>,
    /// Commit timestamps handed out whose transactions are not yet visible,
    /// with the LSN of each one's commit record.
    in_flight: BTreeMap<u64, u64>,
    /// The first WAL position each open transaction wrote data to before
    /// committing (large transactions log as they go).
    first_logged: HashMap<TxnId, u64>,
    /// The last commit timestamp handed out.
    last_assigned: u64,
    /// Every commit at or below this is durable and stamped.
    visible_ts: u64,
    /// Transactions waiting for each transaction to end.
    waiters: HashMap<TxnId, Vec<oneshot::Sender<WaitOutcome>>>,
    /// Which transaction each waiting transaction waits for.
    waits_for: HashMap<TxnId, TxnId>,
}

impl TxnManager {
    /// `recovered_ts` is the newest commit timestamp found in the log, so new
    /// timestamps exceed every recovered one even if the wall clock went back.
    pub fn new(recovered_ts: u64) -> Self {
        Self::recovered(recovered_ts, 1)
    }

    /// After recovery: timestamps above `recovered_ts`, and transaction ids
    /// from `first_txn` on, so ids in the log's replay window are never reused.
    pub fn recovered(recovered_ts: u64, first_txn: TxnId) -> Self {
        let clock = Hlc::new();
        clock.observe(recovered_ts);
        let start = clock.now();
        TxnManager {
            clock,
            next_txn: AtomicU64::new(first_txn.max(1)),
            inner: Mutex::new(Inner {
                last_assigned: start,
                visible_ts: start,
                ..Inner::default()
            }),
        }
    }

    /// The id the next transaction will get.
    pub fn next_txn_id(&self) -> TxnId {
        self.next_txn.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a transaction. Take its snapshot with [`TxnManager::snapshot`].
    pub fn begin(&self) -> TxnId {
        let txn = self.next_txn.fetch_add(1, Ordering::Relaxed);
        let mut inner = self.lock();
        let ts = inner.visible_ts;
        inner.active.insert(txn, ts);
        *inner.snapshot_counts.entry(ts).or_default() += 1;
        txn
    }

    /// A fresh snapshot for `txn` (each statement under READ COMMITTED, once
    /// under REPEATABLE READ). Moves the transaction's GC pin forward.
    pub fn snapshot(&self, txn: TxnId) -> Snapshot {
        let mut inner = self.lock();
        let read_ts = inner.visible_ts;
        if let Some(pinned) = inner.active.get(&txn).copied() {
            inner.unpin(pinned);
            inner.active.insert(txn, read_ts);
            *inner.snapshot_counts.entry(read_ts).or_default() += 1;
        }
        Snapshot { read_ts, txn }
    }

    /// The newest timestamp below which every commit is visible.
    pub fn visible_ts(&self) -> u64 {
        self.lock().visible_ts
    }

    /// Versions whose `end` is a commit timestamp at or below this are
    /// invisible to every snapshot, now and later: garbage.
    pub fn gc_horizon(&self) -> u64 {
        let inner = self.lock();
        inner
            .snapshot_counts
            .keys()
            .next()
            .copied()
            .unwrap_or(inner.visible_ts)
    }

    /// Number of open transactions.
    pub fn active_count(&self) -> usize {
        self.lock().active.len()
    }

    /// Hands out the next commit timestamp and, under the same ordering,
    /// runs `append` (which writes the commit's WAL record): so commit
    /// timestamps and log positions rise together. If `append` fails the
    /// timestamp is withdrawn and the transaction stays open for rollback.
    /// `append` returns the LSN where the record starts.
    pub fn commit_in_order(
        &self,
        txn: TxnId,
        append: impl FnOnce(u64) -> Result<u64>,
    ) -> Result<CommitTicket> {
        let mut inner = self.lock();
        assert!(
            inner.active.contains_key(&txn),
            "committing transaction {txn} that is not open"
        );
        let ts = self.clock.now().max(inner.last_assigned + 1);
        let lsn = append(ts)?;
        inner.last_assigned = ts;
        inner.in_flight.insert(ts, lsn);
        Ok(CommitTicket { ts, lsn })
    }

    /// [`TxnManager::commit_in_order`] for a commit with nothing to log.
    pub fn assign_commit_ts(&self, txn: TxnId) -> CommitTicket {
        self.commit_in_order(txn, |_| Ok(0))
            .expect("nothing to append")
    }

    /// Records that `txn` wrote part of its changes to the WAL at `lsn`
    /// before committing, so a checkpoint keeps that part.
    pub fn note_logged(&self, txn: TxnId, lsn: u64) {
        self.lock().first_logged.entry(txn).or_insert(lsn);
    }

    /// A snapshot for a checkpoint image, and the WAL position replay must
    /// start from so that every commit the snapshot does not see is replayed:
    /// the oldest of the records of commits still in flight, the first
    /// records of open transactions, and `next_lsn` (read under the same lock,
    /// so no commit slips between).
    pub fn checkpoint_snapshot(
        &self,
        txn: TxnId,
        next_lsn: impl FnOnce() -> u64,
    ) -> (Snapshot, u64) {
        let snapshot = self.snapshot(txn);
        let inner = self.lock();
        let snapshot = Snapshot {
            read_ts: inner.visible_ts.min(snapshot.read_ts),
            txn,
        };
        let redo = inner
            .in_flight
            .values()
            .chain(inner.first_logged.values())
            .copied()
            .chain(std::iter::once(next_lsn()))
            .min()
            .expect("next_lsn is always there");
        (snapshot, redo)
    }

    /// Ends a committed transaction once its record is durable and its
    /// versions carry `ts`: later snapshots see it, waiters wake up.
    pub fn finish_commit(&self, txn: TxnId, ts: u64) {
        let mut inner = self.lock();
        assert!(
            inner.in_flight.remove(&ts).is_some(),
            "finishing a commit timestamp that was not handed out"
        );
        inner.visible_ts = match inner.in_flight.first_key_value() {
            Some((&oldest, _)) => oldest - 1,
            None => inner.last_assigned,
        }
        .max(inner.visible_ts);
        inner.end(txn);
    }

    /// Withdraws a commit timestamp whose record could not be made durable.
    pub fn abandon_commit(&self, txn: TxnId, ts: u64) {
        let mut inner = self.lock();
        inner.in_flight.remove(&ts);
        if inner.in_flight.is_empty() {
            inner.visible_ts = inner.visible_ts.max(inner.last_assigned);
        }
        inner.end(txn);
    }

    /// Ends a transaction that rolled back (after its versions were undone).
    pub fn finish_abort(&self, txn: TxnId) {
        self.lock().end(txn);
    }

    /// Registers that `waiter` must wait for `holder` to end, and returns
    /// the future to await. Fails with SQLSTATE 40P01 if that wait would
    /// close a cycle. If `holder` already ended the future is ready at once.
    pub fn wait_for(&self, waiter: TxnId, holder: TxnId) -> Result<oneshot::Receiver<WaitOutcome>> {
        assert_ne!(waiter, holder, "a transaction never waits for itself");
        let mut inner = self.lock();
        let (tx, rx) = oneshot::channel();
        if !inner.active.contains_key(&holder) {
            let _ = tx.send(WaitOutcome::Ended);
            return Ok(rx);
        }
        let mut next = Some(holder);
        while let Some(txn) = next {
            if txn == waiter {
                return Err(ZyronError::new(
                    SqlState::DEADLOCK_DETECTED,
                    format!("deadlock detected: transaction {waiter} and transaction {holder} wait for each other"),
                )
                .with_hint("See server log for query details."));
            }
            next = inner.waits_for.get(&txn).copied();
        }
        inner.waits_for.insert(waiter, holder);
        inner.waiters.entry(holder).or_default().push(tx);
        Ok(rx)
    }

    /// Keeps versions visible at `read_ts` from garbage collection until
    /// [`TxnManager::unpin`]: for a scan that outlives its transaction (a
    /// result streamed after an autocommit statement ended).
    pub fn pin(&self, read_ts: u64) {
        *self.lock().snapshot_counts.entry(read_ts).or_default() += 1;
    }

    pub fn unpin(&self, read_ts: u64) {
        self.lock().unpin(read_ts);
    }

    /// How many transactions are waiting for another to end.
    pub fn waiting_count(&self) -> usize {
        self.lock().waits_for.len()
    }

    /// Whether `txn` is waiting for another transaction.
    pub fn is_waiting(&self, txn: TxnId) -> bool {
        self.lock().waits_for.contains_key(&txn)
    }

    /// Clears `waiter`'s wait once it resumed (or gave up).
    pub fn stop_waiting(&self, waiter: TxnId) {
        self.lock().waits_for.remove(&waiter);
    }

    /// Records that commits up to `ts` exist (found during recovery).
    pub fn observe_recovered(&self, ts: u64) {
        self.clock.observe(ts);
        let mut inner = self.lock();
        inner.last_assigned = inner.last_assigned.max(ts);
        if inner.in_flight.is_empty() {
            inner.visible_ts = inner.visible_ts.max(ts);
        }
    }
}

impl Inner {
    fn unpin(&mut self, ts: u64) {
        if let Some(count) = self.snapshot_counts.get_mut(&ts) {
            *count -= 1;
            if *count == 0 {
                self.snapshot_counts.remove(&ts);
            }
        }
    }

    fn end(&mut self, txn: TxnId) {
        if let Some(pinned) = self.active.remove(&txn) {
            self.unpin(pinned);
        }
        self.waits_for.remove(&txn);
        self.first_logged.remove(&txn);
        for waiter in self.waiters.remove(&txn).unwrap_or_default() {
            let _ = waiter.send(WaitOutcome::Ended);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{OPEN, txn_mark};

    #[test]
    fn visibility_waits_for_every_earlier_commit() {
        let manager = TxnManager::new(0);
        let (a, b) = (manager.begin(), manager.begin());
        let ta = manager.assign_commit_ts(a);
        let tb = manager.assign_commit_ts(b);
        assert!(tb.ts > ta.ts);
        let before = manager.visible_ts();
        // b finishes first, but a (earlier) is still in flight: nothing new is visible.
        manager.finish_commit(b, tb.ts);
        assert_eq!(manager.visible_ts(), before.max(ta.ts - 1));
        let reader = manager.begin();
        assert!(!manager.snapshot(reader).sees(tb.ts, OPEN));
        manager.finish_commit(a, ta.ts);
        assert_eq!(manager.visible_ts(), tb.ts);
        let snap = manager.snapshot(reader);
        assert!(snap.sees(ta.ts, OPEN) && snap.sees(tb.ts, OPEN));
    }

    #[test]
    fn gc_horizon_is_the_oldest_pinned_snapshot() {
        let manager = TxnManager::new(0);
        let old = manager.begin();
        let old_snapshot = manager.snapshot(old);
        for _ in 0..3 {
            let w = manager.begin();
            let t = manager.assign_commit_ts(w);
            manager.finish_commit(w, t.ts);
        }
        assert_eq!(manager.gc_horizon(), old_snapshot.read_ts);
        manager.finish_abort(old);
        assert_eq!(manager.gc_horizon(), manager.visible_ts());
        assert!(manager.gc_horizon() > old_snapshot.read_ts);
    }

    #[test]
    fn waits_end_when_the_holder_ends_and_cycles_are_refused() {
        let manager = TxnManager::new(0);
        let (a, b, c) = (manager.begin(), manager.begin(), manager.begin());
        let mut wait_ab = manager.wait_for(a, b).unwrap();
        let _wait_bc = manager.wait_for(b, c).unwrap();
        let err = manager.wait_for(c, a).unwrap_err();
        assert_eq!(err.sqlstate().code(), "40P01");
        assert_eq!(wait_ab.try_recv().unwrap(), None, "b is still open");
        manager.finish_abort(b);
        assert_eq!(wait_ab.try_recv().unwrap(), Some(WaitOutcome::Ended));
        manager.stop_waiting(a);
        // b ended, so c waiting for a is no longer a cycle.
        let mut ready = manager.wait_for(c, b).unwrap();
        assert_eq!(ready.try_recv().unwrap(), Some(WaitOutcome::Ended));
    }

    #[test]
    fn a_failed_append_hands_out_nothing() {
        let manager = TxnManager::new(0);
        let txn = manager.begin();
        let visible = manager.visible_ts();
        let failed = manager.commit_in_order(txn, |_| Err(ZyronError::internal("disk full")));
        assert!(failed.is_err());
        assert_eq!(manager.visible_ts(), visible);
        manager.finish_abort(txn);
        assert_eq!(manager.active_count(), 0);
    }

    #[test]
    fn own_writes_are_visible_only_to_their_transaction() {
        let manager = TxnManager::new(0);
        let (me, other) = (manager.begin(), manager.begin());
        assert!(manager.snapshot(me).sees(txn_mark(me), OPEN));
        assert!(!manager.snapshot(other).sees(txn_mark(me), OPEN));
    }
}
