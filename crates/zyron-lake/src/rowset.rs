//! Row positions of one data file as sorted, disjoint half-open ranges: the
//! form a deletion vector takes in the log. Deleting a run of neighbouring
//! rows (a predicate on a clustered column, a key range) costs one range.

use serde::{Deserialize, Serialize};

/// Sorted, disjoint, non-adjacent `[start, end)` ranges of row positions.
///
/// ```
/// use zyron_lake::RowSet;
/// let mut rows = RowSet::from_positions([7, 3, 4, 5]);
/// assert_eq!(rows.ranges(), &[(3, 6), (7, 8)]);
/// rows.union_with(&RowSet::from_positions([6]));
/// assert_eq!(rows.ranges(), &[(3, 8)]);
/// assert_eq!(rows.len(), 5);
/// assert!(rows.contains(5) && !rows.contains(8));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<(u64, u64)>", into = "Vec<(u64, u64)>")]
pub struct RowSet {
    ranges: Vec<(u64, u64)>,
}

impl RowSet {
    /// Positions in any order, duplicates allowed.
    pub fn from_positions(positions: impl IntoIterator<Item = u64>) -> RowSet {
        let mut sorted: Vec<u64> = positions.into_iter().collect();
        sorted.sort_unstable();
        sorted.dedup();
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for p in sorted {
            match ranges.last_mut() {
                Some((_, end)) if *end == p => *end = p + 1,
                _ => ranges.push((p, p + 1)),
            }
        }
        RowSet { ranges }
    }

    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// How many positions.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(|(s, e)| e - s).sum()
    }

    /// One past the largest position (0 when empty).
    pub fn end(&self) -> u64 {
        self.ranges.last().map_or(0, |r| r.1)
    }

    pub fn contains(&self, position: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.1 <= position);
        self.ranges.get(i).is_some_and(|r| r.0 <= position)
    }

    /// Whether any position is in both sets.
    pub fn intersects(&self, other: &RowSet) -> bool {
        let (mut i, mut j) = (0, 0);
        while i < self.ranges.len() && j < other.ranges.len() {
            let (a, b) = (self.ranges[i], other.ranges[j]);
            if a.0 < b.1 && b.0 < a.1 {
                return true;
            }
            if a.1 <= b.1 { i += 1 } else { j += 1 }
        }
        false
    }

    pub fn union_with(&mut self, other: &RowSet) {
        let mut all: Vec<(u64, u64)> = Vec::with_capacity(self.ranges.len() + other.ranges.len());
        all.extend_from_slice(&self.ranges);
        all.extend_from_slice(&other.ranges);
        all.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(all.len());
        for (start, end) in all {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        self.ranges = merged;
    }

    /// The positions in `self` that are not in `other`.
    pub fn difference(&self, other: &RowSet) -> RowSet {
        let mut out = Vec::new();
        let mut j = 0;
        for &(start, end) in &self.ranges {
            let mut cursor = start;
            while j < other.ranges.len() && other.ranges[j].1 <= cursor {
                j += 1;
            }
            let mut k = j;
            while cursor < end {
                match other.ranges.get(k) {
                    Some(&(s, e)) if s < end => {
                        if s > cursor {
                            out.push((cursor, s));
                        }
                        cursor = cursor.max(e);
                        k += 1;
                    }
                    _ => {
                        out.push((cursor, end));
                        cursor = end;
                    }
                }
            }
        }
        RowSet { ranges: out }
    }

    /// The positions in `0..len` that are not in the set, as a keep-mask.
    pub fn keep_mask(&self, len: u64) -> Vec<bool> {
        let mut keep = vec![true; len as usize];
        for &(start, end) in &self.ranges {
            for k in &mut keep[start.min(len) as usize..end.min(len) as usize] {
                *k = false;
            }
        }
        keep
    }
}

impl TryFrom<Vec<(u64, u64)>> for RowSet {
    type Error = String;

    /// Refuses ranges that are empty, unsorted, overlapping or touching, so
    /// one set has one spelling.
    fn try_from(ranges: Vec<(u64, u64)>) -> Result<RowSet, String> {
        for (i, &(start, end)) in ranges.iter().enumerate() {
            if start >= end {
                return Err(format!("row range [{start}, {end}) is empty"));
            }
            if i > 0 && ranges[i - 1].1 >= start {
                return Err(format!(
                    "row ranges must be sorted and apart: [{}, {}) then [{start}, {end})",
                    ranges[i - 1].0,
                    ranges[i - 1].1
                ));
            }
        }
        Ok(RowSet { ranges })
    }
}

impl From<RowSet> for Vec<(u64, u64)> {
    fn from(rows: RowSet) -> Vec<(u64, u64)> {
        rows.ranges
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_and_intersection_agree_with_sets_of_positions() {
        let a = RowSet::from_positions([0, 1, 2, 10, 11, 40]);
        let b = RowSet::from_positions([3, 12, 13, 39]);
        assert!(!a.intersects(&b));
        let mut c = a.clone();
        c.union_with(&b);
        assert_eq!(c.ranges(), &[(0, 4), (10, 14), (39, 41)]);
        assert!(c.intersects(&RowSet::from_positions([13])));
        assert!(!c.intersects(&RowSet::from_positions([14, 38])));
        assert_eq!(c.len(), 10);
        let mask = c.keep_mask(42);
        assert_eq!(mask.iter().filter(|k| !**k).count(), 10);
        assert!(!mask[40] && mask[41] && mask[14]);
    }

    #[test]
    fn difference_removes_exactly_the_other_positions() {
        let a = RowSet::from_positions((0..50).chain(60..70));
        let b = RowSet::from_positions([0, 5, 6, 7, 49, 50, 65, 80]);
        let want: Vec<u64> = (0..50)
            .chain(60..70)
            .filter(|p| ![0, 5, 6, 7, 49, 65].contains(p))
            .collect();
        assert_eq!(a.difference(&b), RowSet::from_positions(want));
        assert!(a.difference(&a).is_empty());
        assert_eq!(a.difference(&RowSet::default()), a);
    }

    #[test]
    fn serialised_as_ranges_and_malformed_ranges_are_refused() {
        let rows = RowSet::from_positions([5, 6, 9]);
        assert_eq!(serde_json::to_string(&rows).unwrap(), "[[5,7],[9,10]]");
        let back: RowSet = serde_json::from_str("[[5,7],[9,10]]").unwrap();
        assert_eq!(back, rows);
        for bad in [
            "[[5,5]]",
            "[[5,7],[6,8]]",
            "[[5,7],[7,8]]",
            "[[9,10],[1,2]]",
        ] {
            assert!(serde_json::from_str::<RowSet>(bad).is_err(), "{bad}");
        }
    }
}
