//! Whether a connection is in the middle of a query, so that a graceful
//! shutdown can let in-flight queries finish and close idle connections at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

#[derive(Default)]
pub struct Activity {
    in_flight: AtomicUsize,
    became_idle: Notify,
    /// The server-wide count of connections with a query in flight.
    server_in_flight: Option<Arc<AtomicUsize>>,
}

/// Marks a query in flight for as long as it lives.
pub struct Busy<'a>(&'a Activity);

impl Activity {
    /// Activity of one connection that also counts into `server_in_flight`.
    pub fn counted_in(server_in_flight: Arc<AtomicUsize>) -> Self {
        Self {
            server_in_flight: Some(server_in_flight),
            ..Self::default()
        }
    }

    pub fn begin(&self) -> Busy<'_> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        if let Some(total) = &self.server_in_flight {
            total.fetch_add(1, Ordering::SeqCst);
        }
        Busy(self)
    }

    pub fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) == 0
    }

    /// Returns once no query is in flight, or after `grace` at the latest.
    /// True if the connection became idle in time.
    pub async fn wait_idle(&self, grace: Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.became_idle.notified();
                if self.is_idle() {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(grace, wait).await.is_ok()
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        if let Some(total) = &self.0.server_in_flight {
            total.fetch_sub(1, Ordering::SeqCst);
        }
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.became_idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_connection_returns_at_once_busy_one_waits_for_release() {
        let activity = Arc::new(Activity::default());
        assert!(activity.wait_idle(Duration::from_millis(1)).await);

        let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let worker = {
            let activity = Arc::clone(&activity);
            tokio::spawn(async move {
                let _busy = activity.begin();
                started_tx.send(()).unwrap();
                release_rx.await.unwrap();
            })
        };
        started_rx.await.unwrap();
        // Still busy: a short grace runs out.
        assert!(!activity.wait_idle(Duration::from_millis(20)).await);
        let waiter = {
            let activity = Arc::clone(&activity);
            tokio::spawn(async move { activity.wait_idle(Duration::from_secs(30)).await })
        };
        release_tx.send(()).unwrap();
        worker.await.unwrap();
        assert!(waiter.await.unwrap());
    }
}
