//! Clustering: rows reordered along a space-filling curve (Z-order or
//! Hilbert) over chosen keys, columns or values derived from each row, so
//! that rows close in every key share files and a selective query on any
//! of them skips most files by their zone maps.
//!
//! Each key is first turned into its rank among the rows (so skewed or
//! clumped values spread over the whole curve, as Delta's range ids do),
//! scaled to `64 / keys` bits; the curve interleaves those bits.
//!
//! ```
//! use zyron_lake::cluster::{Curve, curve_index};
//! // Z-order of (x=1, y=0) and (x=0, y=1) on a 2-bit grid.
//! assert_eq!(curve_index(Curve::ZOrder, &mut [0b01, 0b00], 2), 0b0010);
//! assert_eq!(curve_index(Curve::ZOrder, &mut [0b00, 0b01], 2), 0b0001);
//! ```

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, sort_to_indices, take_record_batch};
use zyron_common::{Result, SqlState, ZyronError};

use crate::data::LakeWrite;
use crate::log::{Action, RemovedFile};
use crate::optimize::OptimizeReport;
use crate::table::LakeTable;

/// Bits of the curve index; split evenly between the keys (at most 32 each).
const INDEX_BITS: u32 = 64;
/// The most keys a curve takes (each keeps at least 8 bits).
pub const MAX_CLUSTER_KEYS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    /// Bits interleaved: cheap, with jumps at power-of-two boundaries.
    ZOrder,
    /// Hilbert curve (Skilling's transpose): consecutive positions are
    /// neighbours, so a file's zone maps are tighter.
    Hilbert,
}

/// A value rows are clustered by.
#[derive(Clone)]
pub enum ClusterKey {
    Column(String),
    /// A value computed from each batch (say `ts / 3600` or a hash): the
    /// SQL layer passes an expression here.
    Derived {
        name: String,
        eval: Arc<dyn Fn(&RecordBatch) -> Result<ArrayRef> + Send + Sync>,
    },
}

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClusterKey::Column(name) => write!(f, "Column({name})"),
            ClusterKey::Derived { name, .. } => write!(f, "Derived({name})"),
        }
    }
}

/// How to cluster: the curve, its keys, and the rows per file written.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    pub curve: Curve,
    pub keys: Vec<ClusterKey>,
    pub target_file_rows: usize,
}

impl ClusterSpec {
    fn check(&self) -> Result<()> {
        if self.keys.is_empty() || self.keys.len() > MAX_CLUSTER_KEYS {
            return Err(ZyronError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!(
                    "clustering takes 1 to {MAX_CLUSTER_KEYS} keys, not {}",
                    self.keys.len()
                ),
            ));
        }
        if self.target_file_rows == 0 {
            return Err(ZyronError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                "target_file_rows must be at least 1",
            ));
        }
        Ok(())
    }

    /// The key's values for every row of `batch`.
    fn key_values(&self, key: &ClusterKey, batch: &RecordBatch) -> Result<ArrayRef> {
        match key {
            ClusterKey::Column(name) => batch.column_by_name(name).cloned().ok_or_else(|| {
                ZyronError::new(
                    SqlState::UNDEFINED_COLUMN,
                    format!("cannot cluster by column \"{name}\": the table has no such column"),
                )
            }),
            ClusterKey::Derived { eval, .. } => eval(batch),
        }
    }

    /// `batch`'s rows ordered along the curve.
    pub fn order(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        self.check()?;
        let rows = batch.num_rows();
        let bits = (INDEX_BITS / self.keys.len() as u32).min(32);
        let mut coordinates = vec![vec![0u32; self.keys.len()]; rows];
        for (k, key) in self.keys.iter().enumerate() {
            let values = self.key_values(key, batch)?;
            let sorted = sort_to_indices(&values, None, None).map_err(arrow_error)?;
            for (rank, row) in sorted.values().iter().enumerate() {
                coordinates[*row as usize][k] = scale_rank(rank, rows, bits);
            }
        }
        let mut keyed: Vec<(u64, u32)> = coordinates
            .iter_mut()
            .enumerate()
            .map(|(row, c)| (curve_index(self.curve, c, bits), row as u32))
            .collect();
        keyed.sort_unstable();
        let order = UInt32Array::from_iter_values(keyed.into_iter().map(|(_, row)| row));
        take_record_batch(batch, &order).map_err(arrow_error)
    }
}

/// `rank` of `rows` as a `bits`-bit coordinate.
fn scale_rank(rank: usize, rows: usize, bits: u32) -> u32 {
    ((rank as u128) << bits)
        .checked_div(rows as u128)
        .unwrap_or(0) as u32
}

/// The position of point `coordinates` (each `bits` bits, at most 64 bits
/// in all) along `curve`. The coordinates are overwritten.
pub fn curve_index(curve: Curve, coordinates: &mut [u32], bits: u32) -> u64 {
    debug_assert!(bits >= 1 && bits <= 32 && bits as usize * coordinates.len() <= 64);
    if curve == Curve::Hilbert {
        axes_to_transpose(coordinates, bits);
    }
    let mut index = 0u64;
    for bit in (0..bits).rev() {
        for c in coordinates.iter() {
            index = (index << 1) | u64::from((c >> bit) & 1);
        }
    }
    index
}

/// John Skilling, "Programming the Hilbert curve" (AIP Conf. Proc. 707,
/// 2004): turns axes into the transposed Hilbert index, whose interleaved
/// bits are the position along the curve.
fn axes_to_transpose(x: &mut [u32], bits: u32) {
    let n = x.len();
    let m = 1u32 << (bits - 1);
    let mut q = m;
    while q > 1 {
        let p = q - 1;
        for i in 0..n {
            if x[i] & q != 0 {
                x[0] ^= p;
            } else {
                let t = (x[0] ^ x[i]) & p;
                x[0] ^= t;
                x[i] ^= t;
            }
        }
        q >>= 1;
    }
    for i in 1..n {
        x[i] ^= x[i - 1];
    }
    let mut t = 0;
    let mut q = m;
    while q > 1 {
        if x[n - 1] & q != 0 {
            t ^= q - 1;
        }
        q >>= 1;
    }
    for v in x.iter_mut() {
        *v ^= t;
    }
}

fn arrow_error(e: arrow::error::ArrowError) -> ZyronError {
    ZyronError::internal(format!("clustering: {e}"))
}

impl LakeWrite<'_> {
    /// Appends `batches` ordered along `spec`'s curve, split into files of
    /// `spec.target_file_rows` rows: loading with clustering.
    pub async fn append_clustered(
        &mut self,
        batches: &[RecordBatch],
        spec: &ClusterSpec,
    ) -> Result<()> {
        let Some(first) = batches.first() else {
            return Ok(());
        };
        let all = concat_batches(&first.schema(), batches).map_err(arrow_error)?;
        let ordered = spec.order(&all)?;
        let mut offset = 0;
        while offset < ordered.num_rows() {
            let len = spec.target_file_rows.min(ordered.num_rows() - offset);
            self.append(&[ordered.slice(offset, len)]).await?;
            offset += len;
        }
        Ok(())
    }
}

impl LakeTable {
    /// CLUSTER BY: rewrites every live file with all rows ordered along
    /// `spec`'s curve, in one commit (a concurrent delete of a rewritten
    /// file's rows makes it fail with 40001). Holds the table's live rows
    /// in memory.
    pub async fn cluster(&self, spec: &ClusterSpec) -> Result<OptimizeReport> {
        spec.check()?;
        let mut write = self.begin().await?;
        let files: Vec<_> = write.base().files.values().cloned().collect();
        let mut batches = Vec::new();
        let mut report = OptimizeReport::default();
        for file in &files {
            batches.extend(self.read_file(file, None, &[]).await?);
            report.deleted_rows_purged += file.deleted.len();
            report.files_removed += 1;
            write.push(Action::Remove(RemovedFile {
                path: file.path.clone(),
            }));
        }
        let before = write.actions().len();
        write.append_clustered(&batches, spec).await?;
        for action in &write.actions()[before..] {
            if let Action::Add(file) = action {
                report.files_added += 1;
                report.rows_written += file.rows;
                report.bytes_written += file.bytes;
            }
        }
        if report.files_removed == 0 {
            return Ok(report);
        }
        report.version = Some(write.commit_rearrangement("cluster").await?.version);
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every cell of a `side` x `side` grid, ordered along `curve`.
    fn walk(curve: Curve, bits: u32) -> Vec<(u32, u32)> {
        let side = 1u32 << bits;
        let mut cells: Vec<(u64, (u32, u32))> = (0..side)
            .flat_map(|x| (0..side).map(move |y| (x, y)))
            .map(|(x, y)| (curve_index(curve, &mut [x, y], bits), (x, y)))
            .collect();
        cells.sort_unstable();
        let indices: Vec<u64> = cells.iter().map(|c| c.0).collect();
        assert_eq!(
            indices,
            (0..u64::from(side * side)).collect::<Vec<_>>(),
            "a bijection"
        );
        cells.into_iter().map(|c| c.1).collect()
    }

    #[test]
    fn the_hilbert_curve_only_steps_to_neighbours() {
        for bits in 1..=5 {
            let cells = walk(Curve::Hilbert, bits);
            for pair in cells.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                assert_eq!(a.0.abs_diff(b.0) + a.1.abs_diff(b.1), 1, "{a:?} -> {b:?}");
            }
        }
    }

    #[test]
    fn z_order_visits_quadrants_in_turn() {
        let cells = walk(Curve::ZOrder, 2);
        assert_eq!(&cells[..4], &[(0, 0), (0, 1), (1, 0), (1, 1)]);
        // Each quadrant of the 4x4 grid is finished before the next.
        for (i, quadrant) in cells.chunks(4).enumerate() {
            let q = quadrant[0];
            assert!(
                quadrant
                    .iter()
                    .all(|c| (c.0 / 2, c.1 / 2) == (q.0 / 2, q.1 / 2)),
                "{i}"
            );
        }
        assert_eq!(cells.len(), 16);
    }

    #[test]
    fn ranks_fill_the_coordinate_range() {
        assert_eq!(scale_rank(0, 10, 8), 0);
        assert_eq!(scale_rank(9, 10, 8), 230);
        assert_eq!(scale_rank(5, 10, 32), 1 << 31);
        assert_eq!(scale_rank(0, 0, 8), 0);
    }
}
