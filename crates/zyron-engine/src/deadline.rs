//! `statement_timeout`: a statement's rows stop with 57014 once its time is up.
//!
//! The bound is on the result stream, where DataFusion does a query's work:
//! the stream is polled between batches and at every yield of its operators,
//! and dropping it stops the tasks that feed it.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream};
use futures::{Future, Stream, StreamExt};
use tokio::time::{Instant, Sleep};
use zyron_common::{SqlState, ZyronError};

/// `stream`, ending with 57014 when `deadline` passes before its last batch.
pub fn bounded(stream: SendableRecordBatchStream, deadline: Instant) -> SendableRecordBatchStream {
    Box::pin(DeadlineStream {
        schema: stream.schema(),
        inner: Some(stream),
        deadline,
        timer: Box::pin(tokio::time::sleep_until(deadline)),
    })
}

/// PostgreSQL's message for a statement stopped by `statement_timeout`.
pub fn timeout_error() -> ZyronError {
    ZyronError::new(
        SqlState::QUERY_CANCELED,
        "canceling statement due to statement timeout",
    )
}

/// A `statement_timeout` value in PostgreSQL's syntax: a number of
/// milliseconds, or a number with a unit (`us`, `ms`, `s`, `min`, `h`, `d`).
/// Zero means no limit.
pub fn parse_timeout(value: &str) -> Option<Option<Duration>> {
    let value = value.trim();
    let digits_end = value
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-' | 'e' | 'E')))
        .unwrap_or(value.len());
    let (number, unit) = value.split_at(digits_end);
    let number: f64 = number.parse().ok()?;
    let unit_ms = match unit.trim() {
        "us" => 0.001,
        "" | "ms" => 1.0,
        "s" => 1_000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return None,
    };
    let millis = (number * unit_ms).round();
    if !(0.0..=i32::MAX as f64).contains(&millis) {
        return None;
    }
    Some((millis > 0.0).then(|| Duration::from_millis(millis as u64)))
}

struct DeadlineStream {
    schema: SchemaRef,
    /// Taken when the time is up (which stops the work feeding it) or the rows end.
    inner: Option<SendableRecordBatchStream>,
    deadline: Instant,
    /// Wakes the consumer at the deadline while the inner stream waits.
    timer: Pin<Box<Sleep>>,
}

impl DeadlineStream {
    fn expire(&mut self) -> Poll<Option<DfResult<RecordBatch>>> {
        self.inner = None;
        let error = DataFusionError::External(Box::new(timeout_error()));
        Poll::Ready(Some(Err(error)))
    }
}

impl Stream for DeadlineStream {
    type Item = DfResult<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // The clock is read on every poll: the timer alone would not fire for
        // a stream that is always ready, nor while tokio's cooperative budget,
        // which DataFusion's operators spend, is exhausted.
        if self.inner.is_some() && Instant::now() >= self.deadline {
            return self.expire();
        }
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match inner.poll_next_unpin(cx) {
            Poll::Ready(None) => {
                self.inner = None;
                Poll::Ready(None)
            }
            Poll::Ready(item) => Poll::Ready(item),
            Poll::Pending => match self.timer.as_mut().poll(cx) {
                Poll::Ready(()) => self.expire(),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl RecordBatchStream for DeadlineStream {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_postgresql_units() {
        assert_eq!(parse_timeout("0"), Some(None));
        assert_eq!(parse_timeout("250"), Some(Some(Duration::from_millis(250))));
        assert_eq!(parse_timeout("5s"), Some(Some(Duration::from_secs(5))));
        assert_eq!(parse_timeout("2 min"), Some(Some(Duration::from_secs(120))));
        assert_eq!(parse_timeout("1h"), Some(Some(Duration::from_secs(3600))));
        assert_eq!(parse_timeout("5 parsecs"), None);
        assert_eq!(parse_timeout("1e3"), Some(Some(Duration::from_secs(1))));
        assert_eq!(parse_timeout("-1"), None);
    }

    #[tokio::test]
    async fn a_stream_that_outlives_its_deadline_fails_with_57014() {
        let schema = Arc::new(datafusion::arrow::datatypes::Schema::empty());
        let never = futures::stream::pending::<DfResult<RecordBatch>>();
        let stream: SendableRecordBatchStream = Box::pin(
            datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, never),
        );
        let mut stream = bounded(stream, Instant::now() + Duration::from_millis(20));
        let error = stream
            .next()
            .await
            .expect("an item")
            .expect_err("timed out");
        let zyron = crate::errors::to_zyron_error(error);
        assert_eq!(zyron.sqlstate(), SqlState::QUERY_CANCELED);
        assert!(stream.next().await.is_none());
    }
}
