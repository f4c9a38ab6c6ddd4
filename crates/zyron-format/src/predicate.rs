//! Filters the reader evaluates on encoded data and on zone maps.
//!
//! A [`ColumnPredicate`] names a top-level column and a comparison. The reader turns it into a
//! matcher for the column's stream domain ([`IntMatcher`], [`FloatMatcher`], [`BytesMatcher`]),
//! which encodings evaluate on dictionary values, runs or bit-packed offsets before (or instead
//! of) decoding. Results are exact: a row is selected if and only if the predicate holds and
//! the value is not null. Floats compare by IEEE 754 total order, as Arrow's kernels do.

use std::cmp::Ordering;
use std::ops::Bound;

use crate::stats::Stat;

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
}

impl CmpOp {
    /// Whether `value.cmp(literal)` satisfies `value <op> literal`.
    pub fn holds(self, ord: Ordering) -> bool {
        use Ordering::*;
        match self {
            CmpOp::Eq => ord == Equal,
            CmpOp::NotEq => ord != Equal,
            CmpOp::Lt => ord == Less,
            CmpOp::LtEq => ord != Greater,
            CmpOp::Gt => ord == Greater,
            CmpOp::GtEq => ord != Less,
        }
    }
}

/// A literal in a predicate, in the column's logical domain.
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar {
    /// Any integer type, boolean (0/1), date, time, timestamp, decimal (unscaled) or picosecond timestamp.
    Int(i128),
    Float(f64),
    Bytes(Vec<u8>),
}

/// What a predicate asks of one column.
#[derive(Clone, Debug, PartialEq)]
pub enum PredicateOp {
    Cmp(CmpOp, Scalar),
    In(Vec<Scalar>),
    IsNull,
    IsNotNull,
}

/// A predicate on one top-level column; the reader ANDs a list of them.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnPredicate {
    pub column: usize,
    pub op: PredicateOp,
}

impl ColumnPredicate {
    /// Whether a zone (vector, block or file) with this statistic and null count may hold a match.
    pub fn might_match(&self, stat: &Stat, null_count: u64, value_count: u64) -> bool {
        match &self.op {
            PredicateOp::IsNull => null_count > 0,
            PredicateOp::IsNotNull => null_count < value_count,
            _ if null_count == value_count => false,
            PredicateOp::Cmp(op, v) => stat_might_match(stat, *op, v),
            PredicateOp::In(list) => list.iter().any(|v| stat_might_match(stat, CmpOp::Eq, v)),
        }
    }

    /// Whether a zone's statistic proves that *every* value in it matches (none null), so
    /// the reader can select its rows without decoding the column. Conservative: only
    /// integer-domain statistics (ints, dates, timestamps, decimals) prove a comparison.
    pub fn must_match(&self, stat: &Stat, null_count: u64, value_count: u64) -> bool {
        if value_count == 0 {
            return false;
        }
        match (&self.op, stat) {
            (PredicateOp::IsNull, _) => null_count == value_count,
            (PredicateOp::IsNotNull, _) => null_count == 0,
            _ if null_count > 0 => false,
            (PredicateOp::Cmp(op, Scalar::Int(v)), Stat::Int { min, max }) => match op {
                CmpOp::Lt => max < v,
                CmpOp::LtEq => max <= v,
                CmpOp::Gt => min > v,
                CmpOp::GtEq => min >= v,
                CmpOp::Eq => min == v && max == v,
                CmpOp::NotEq => v < min || v > max,
            },
            (PredicateOp::In(list), Stat::Int { min, max }) => {
                min == max && list.contains(&Scalar::Int(*min))
            }
            _ => false,
        }
    }
}

fn stat_might_match(stat: &Stat, op: CmpOp, v: &Scalar) -> bool {
    let ordering = |lo: Option<Ordering>, hi: Option<Ordering>| -> bool {
        // lo = v.cmp(min), hi = v.cmp(max); None means "unknown", which must not prune.
        match (op, lo, hi) {
            (CmpOp::Eq, Some(Ordering::Less), _) | (CmpOp::Eq, _, Some(Ordering::Greater)) => false,
            (CmpOp::Lt | CmpOp::LtEq, Some(Ordering::Less), _) => false,
            (CmpOp::Lt, Some(Ordering::Equal), _) => false,
            (CmpOp::Gt | CmpOp::GtEq, _, Some(Ordering::Greater)) => false,
            (CmpOp::Gt, _, Some(Ordering::Equal)) => false,
            (CmpOp::NotEq, Some(Ordering::Equal), Some(Ordering::Equal)) => false,
            _ => true,
        }
    };
    match (stat, v) {
        (Stat::Int { min, max }, Scalar::Int(v)) => ordering(Some(v.cmp(min)), Some(v.cmp(max))),
        (Stat::Float { min, max, has_nan }, Scalar::Float(v)) => {
            let hi = if *has_nan {
                None
            } else {
                Some(v.total_cmp(max))
            };
            ordering(Some(v.total_cmp(min)), hi)
        }
        (Stat::Bytes { min, max, exact }, Scalar::Bytes(v)) => {
            let lo = v.as_slice().cmp(min.as_slice());
            let hi = v.as_slice().cmp(max.as_slice());
            // A truncated max is an exclusive upper bound: v == max cannot occur there.
            let hi = if !exact && hi == Ordering::Equal {
                Ordering::Greater
            } else {
                hi
            };
            let lo = if !exact && lo == Ordering::Equal {
                Ordering::Greater
            } else {
                lo
            };
            ordering(Some(lo), Some(hi))
        }
        _ => true,
    }
}

/// A predicate on 64-bit integer lanes.
#[derive(Clone, Debug, PartialEq)]
pub enum IntMatcher {
    /// Inclusive range; empty when `lo > hi`.
    Range(i64, i64),
    NotEq(i64),
    /// Sorted, deduplicated.
    In(Vec<i64>),
}

impl IntMatcher {
    #[inline]
    pub fn matches(&self, v: i64) -> bool {
        match self {
            IntMatcher::Range(lo, hi) => *lo <= v && v <= *hi,
            IntMatcher::NotEq(x) => v != *x,
            IntMatcher::In(set) => set.binary_search(&v).is_ok(),
        }
    }

    /// Builds the matcher for `op` on lanes, where `to_lane` maps a logical value into lane
    /// space monotonically and `lane_range` is the logical range lanes can represent.
    pub fn for_cmp(
        op: CmpOp,
        v: i128,
        lane_min: i128,
        lane_max: i128,
        to_lane: impl Fn(i128) -> i64,
    ) -> IntMatcher {
        let clamp = |x: i128| to_lane(x.clamp(lane_min, lane_max));
        let empty = IntMatcher::Range(1, 0);
        let everything = IntMatcher::Range(i64::MIN, i64::MAX);
        match op {
            CmpOp::Eq if v < lane_min || v > lane_max => empty,
            CmpOp::Eq => IntMatcher::Range(to_lane(v), to_lane(v)),
            CmpOp::NotEq if v < lane_min || v > lane_max => everything,
            CmpOp::NotEq => IntMatcher::NotEq(to_lane(v)),
            CmpOp::Lt if v <= lane_min => empty,
            CmpOp::Lt => IntMatcher::Range(clamp(lane_min), clamp(v - 1)),
            CmpOp::LtEq if v < lane_min => empty,
            CmpOp::LtEq => IntMatcher::Range(clamp(lane_min), clamp(v)),
            CmpOp::Gt if v >= lane_max => empty,
            CmpOp::Gt => IntMatcher::Range(clamp(v + 1), clamp(lane_max)),
            CmpOp::GtEq if v > lane_max => empty,
            CmpOp::GtEq => IntMatcher::Range(clamp(v), clamp(lane_max)),
        }
    }

    pub fn for_in(
        values: impl IntoIterator<Item = i128>,
        lane_min: i128,
        lane_max: i128,
        to_lane: impl Fn(i128) -> i64,
    ) -> IntMatcher {
        let mut set: Vec<i64> = values
            .into_iter()
            .filter(|v| (lane_min..=lane_max).contains(v))
            .map(to_lane)
            .collect();
        set.sort_unstable();
        set.dedup();
        IntMatcher::In(set)
    }
}

/// A predicate on floats (compared as f64 by total order).
#[derive(Clone, Debug, PartialEq)]
pub enum FloatMatcher {
    Range(Bound<f64>, Bound<f64>),
    NotEq(f64),
    In(Vec<f64>),
}

impl FloatMatcher {
    pub fn for_cmp(op: CmpOp, v: f64) -> FloatMatcher {
        use Bound::*;
        match op {
            CmpOp::Eq => FloatMatcher::Range(Included(v), Included(v)),
            CmpOp::NotEq => FloatMatcher::NotEq(v),
            CmpOp::Lt => FloatMatcher::Range(Unbounded, Excluded(v)),
            CmpOp::LtEq => FloatMatcher::Range(Unbounded, Included(v)),
            CmpOp::Gt => FloatMatcher::Range(Excluded(v), Unbounded),
            CmpOp::GtEq => FloatMatcher::Range(Included(v), Unbounded),
        }
    }

    #[inline]
    pub fn matches(&self, v: f64) -> bool {
        match self {
            FloatMatcher::Range(lo, hi) => in_bounds(&v, lo, hi, |a, b| a.total_cmp(b)),
            FloatMatcher::NotEq(x) => v.total_cmp(x) != Ordering::Equal,
            FloatMatcher::In(set) => set.iter().any(|x| v.total_cmp(x) == Ordering::Equal),
        }
    }
}

/// A predicate on byte strings (compared bytewise, which is UTF-8 code point order).
#[derive(Clone, Debug, PartialEq)]
pub enum BytesMatcher {
    Range(Bound<Vec<u8>>, Bound<Vec<u8>>),
    NotEq(Vec<u8>),
    /// Sorted, deduplicated.
    In(Vec<Vec<u8>>),
}

impl BytesMatcher {
    pub fn for_cmp(op: CmpOp, v: Vec<u8>) -> BytesMatcher {
        use Bound::*;
        match op {
            CmpOp::Eq => BytesMatcher::Range(Included(v.clone()), Included(v)),
            CmpOp::NotEq => BytesMatcher::NotEq(v),
            CmpOp::Lt => BytesMatcher::Range(Unbounded, Excluded(v)),
            CmpOp::LtEq => BytesMatcher::Range(Unbounded, Included(v)),
            CmpOp::Gt => BytesMatcher::Range(Excluded(v), Unbounded),
            CmpOp::GtEq => BytesMatcher::Range(Included(v), Unbounded),
        }
    }

    /// The single value an equality matcher accepts, if it is one.
    pub fn equality_values(&self) -> Option<Vec<&[u8]>> {
        match self {
            BytesMatcher::Range(Bound::Included(a), Bound::Included(b)) if a == b => {
                Some(vec![a.as_slice()])
            }
            BytesMatcher::In(set) => Some(set.iter().map(Vec::as_slice).collect()),
            _ => None,
        }
    }

    #[inline]
    pub fn matches(&self, v: &[u8]) -> bool {
        match self {
            BytesMatcher::Range(lo, hi) => {
                let lo = lo.as_ref().map(Vec::as_slice);
                let hi = hi.as_ref().map(Vec::as_slice);
                in_bounds(v, &lo, &hi, |a, b| a.cmp(b))
            }
            BytesMatcher::NotEq(x) => v != x.as_slice(),
            BytesMatcher::In(set) => set.binary_search_by(|x| x.as_slice().cmp(v)).is_ok(),
        }
    }
}

fn in_bounds<T: ?Sized, B: std::borrow::Borrow<T>>(
    v: &T,
    lo: &Bound<B>,
    hi: &Bound<B>,
    cmp: impl Fn(&T, &T) -> Ordering,
) -> bool {
    let above = match lo {
        Bound::Included(l) => cmp(v, l.borrow()) != Ordering::Less,
        Bound::Excluded(l) => cmp(v, l.borrow()) == Ordering::Greater,
        Bound::Unbounded => true,
    };
    let below = match hi {
        Bound::Included(h) => cmp(v, h.borrow()) != Ordering::Greater,
        Bound::Excluded(h) => cmp(v, h.borrow()) == Ordering::Less,
        Bound::Unbounded => true,
    };
    above && below
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_matchers_clamp_to_the_lane_range() {
        let id = |v: i128| v as i64;
        assert_eq!(
            IntMatcher::for_cmp(CmpOp::Lt, 0, 0, 255, id),
            IntMatcher::Range(1, 0)
        );
        assert!(IntMatcher::for_cmp(CmpOp::Gt, -5, 0, 255, id).matches(0));
        assert!(!IntMatcher::for_cmp(CmpOp::Eq, 300, 0, 255, id).matches(44));
        assert!(
            IntMatcher::for_cmp(
                CmpOp::LtEq,
                i128::MAX,
                i64::MIN as i128,
                i64::MAX as i128,
                id
            )
            .matches(i64::MAX)
        );
    }

    #[test]
    fn zone_maps_prune_only_what_cannot_match() {
        let stat = Stat::Int { min: 10, max: 20 };
        let p = |op| ColumnPredicate { column: 0, op };
        assert!(!p(PredicateOp::Cmp(CmpOp::Lt, Scalar::Int(10))).might_match(&stat, 0, 5));
        assert!(p(PredicateOp::Cmp(CmpOp::LtEq, Scalar::Int(10))).might_match(&stat, 0, 5));
        assert!(!p(PredicateOp::Cmp(CmpOp::Gt, Scalar::Int(20))).might_match(&stat, 0, 5));
        assert!(
            !p(PredicateOp::In(vec![Scalar::Int(1), Scalar::Int(30)])).might_match(&stat, 0, 5)
        );
        assert!(!p(PredicateOp::IsNull).might_match(&stat, 0, 5));
        assert!(!p(PredicateOp::Cmp(CmpOp::Eq, Scalar::Int(15))).might_match(&stat, 5, 5));
        let truncated = Stat::Bytes {
            min: b"ab".to_vec(),
            max: b"ac".to_vec(),
            exact: false,
        };
        assert!(
            p(PredicateOp::Cmp(
                CmpOp::Eq,
                Scalar::Bytes(b"abzzz".to_vec())
            ))
            .might_match(&truncated, 0, 5)
        );
        assert!(
            !p(PredicateOp::Cmp(CmpOp::Eq, Scalar::Bytes(b"ac".to_vec())))
                .might_match(&truncated, 0, 5)
        );
    }
}
