//! Statistics: zone maps per 1024-value vector, per block and per file (SPEC.md, "Statistics").

use std::cmp::Ordering;

use crate::error::{Result, corrupt};
use crate::io::{ByteReader, ByteWriter};

/// Longest byte string kept whole in a zone map; longer minima and maxima are truncated to a
/// bound (the minimum to a prefix, the maximum to a prefix whose last byte is incremented).
pub const MAX_STAT_BYTES: usize = 64;

/// Minimum and maximum of the non-null values of a zone.
#[derive(Clone, Debug, PartialEq)]
pub enum Stat {
    /// No non-null value, or a type without an order.
    None,
    /// Integers, booleans, dates, times, timestamps, decimals (unscaled) in their logical value.
    Int { min: i128, max: i128 },
    /// Floats; NaN is left out of min and max and flagged.
    Float { min: f64, max: f64, has_nan: bool },
    /// Byte strings. When `exact` is false, `min <= every value < max`.
    Bytes {
        min: Vec<u8>,
        max: Vec<u8>,
        exact: bool,
    },
}

/// A zone: its statistic and how many values and nulls it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct ZoneMap {
    pub values: u64,
    pub nulls: u64,
    pub stat: Stat,
}

impl Stat {
    pub fn of_ints(values: impl Iterator<Item = i128>) -> Stat {
        let mut minmax: Option<(i128, i128)> = None;
        for v in values {
            minmax = Some(match minmax {
                None => (v, v),
                Some((lo, hi)) => (lo.min(v), hi.max(v)),
            });
        }
        minmax.map_or(Stat::None, |(min, max)| Stat::Int { min, max })
    }

    pub fn of_floats(values: impl Iterator<Item = f64>) -> Stat {
        let mut minmax: Option<(f64, f64)> = None;
        let mut has_nan = false;
        for v in values {
            if v.is_nan() {
                has_nan = true;
                continue;
            }
            minmax = Some(match minmax {
                None => (v, v),
                Some((lo, hi)) => (
                    if v.total_cmp(&lo) == Ordering::Less {
                        v
                    } else {
                        lo
                    },
                    if v.total_cmp(&hi) == Ordering::Greater {
                        v
                    } else {
                        hi
                    },
                ),
            });
        }
        match (minmax, has_nan) {
            (Some((min, max)), _) => Stat::Float { min, max, has_nan },
            (None, true) => Stat::Float {
                min: f64::NAN,
                max: f64::NAN,
                has_nan,
            },
            (None, false) => Stat::None,
        }
    }

    pub fn of_bytes<'a>(values: impl Iterator<Item = &'a [u8]>) -> Stat {
        let mut minmax: Option<(&[u8], &[u8])> = None;
        for v in values {
            minmax = Some(match minmax {
                None => (v, v),
                Some((lo, hi)) => (lo.min(v), hi.max(v)),
            });
        }
        let Some((min, max)) = minmax else {
            return Stat::None;
        };
        if min.len() <= MAX_STAT_BYTES && max.len() <= MAX_STAT_BYTES {
            return Stat::Bytes {
                min: min.to_vec(),
                max: max.to_vec(),
                exact: true,
            };
        }
        match truncated_upper_bound(max) {
            Some(upper) => Stat::Bytes {
                min: min[..min.len().min(MAX_STAT_BYTES)].to_vec(),
                max: upper,
                exact: false,
            },
            None => Stat::None,
        }
    }

    /// Merges two zones' statistics into the statistic of their union.
    pub fn merge(&self, other: &Stat) -> Stat {
        match (self, other) {
            (Stat::None, s) | (s, Stat::None) => s.clone(),
            (Stat::Int { min: a, max: b }, Stat::Int { min: c, max: d }) => Stat::Int {
                min: *a.min(c),
                max: *b.max(d),
            },
            (
                Stat::Float {
                    min: a,
                    max: b,
                    has_nan: n1,
                },
                Stat::Float {
                    min: c,
                    max: d,
                    has_nan: n2,
                },
            ) => {
                let min = if a.is_nan() || c.total_cmp(a) == Ordering::Less {
                    *c
                } else {
                    *a
                };
                let max = if b.is_nan() || d.total_cmp(b) == Ordering::Greater {
                    *d
                } else {
                    *b
                };
                Stat::Float {
                    min,
                    max,
                    has_nan: *n1 || *n2,
                }
            }
            (
                Stat::Bytes {
                    min: a,
                    max: b,
                    exact: e1,
                },
                Stat::Bytes {
                    min: c,
                    max: d,
                    exact: e2,
                },
            ) => {
                let min = a.min(c).clone();
                if *e1 && *e2 {
                    return Stat::Bytes {
                        min,
                        max: b.max(d).clone(),
                        exact: true,
                    };
                }
                // An inexact max is exclusive (every value is below it), an exact one is a
                // value; compare them only once both are exclusive bounds.
                match (exclusive_max(b, *e1), exclusive_max(d, *e2)) {
                    (Some(b), Some(d)) => Stat::Bytes {
                        min,
                        max: b.max(d),
                        exact: false,
                    },
                    _ => Stat::None,
                }
            }
            _ => Stat::None,
        }
    }

    pub(crate) fn write(&self, w: &mut ByteWriter) {
        match self {
            Stat::None => w.u8(0),
            Stat::Int { min, max } => {
                // Zigzag varint minimum and varint width: a zone of small integers takes a few bytes.
                w.u8(1);
                w.uvarint128(((*min << 1) ^ (*min >> 127)) as u128);
                w.uvarint128(max.wrapping_sub(*min) as u128);
            }
            Stat::Float { min, max, has_nan } => {
                w.u8(2);
                w.f64(*min);
                w.f64(*max);
                w.u8(*has_nan as u8);
            }
            Stat::Bytes { min, max, exact } => {
                w.u8(3);
                w.bytes(min);
                w.bytes(max);
                w.u8(*exact as u8);
            }
        }
    }

    pub(crate) fn read(r: &mut ByteReader<'_>) -> Result<Stat> {
        Ok(match r.u8()? {
            0 => Stat::None,
            1 => {
                let zigzag = r.uvarint128()?;
                let min = ((zigzag >> 1) as i128) ^ -((zigzag & 1) as i128);
                let width = r.uvarint128()?;
                // The width is up to 2^128 - 1 (i128::MIN to i128::MAX): add it modulo 2^128
                // and check that it did not run past i128::MAX.
                let max = min.wrapping_add(width as i128);
                if max < min {
                    return corrupt("integer statistic out of range");
                }
                Stat::Int { min, max }
            }
            2 => Stat::Float {
                min: r.f64()?,
                max: r.f64()?,
                has_nan: r.u8()? != 0,
            },
            3 => Stat::Bytes {
                min: r.bytes()?.to_vec(),
                max: r.bytes()?.to_vec(),
                exact: r.u8()? != 0,
            },
            other => return corrupt(format!("statistic kind {other}")),
        })
    }
}

impl ZoneMap {
    pub(crate) fn write(&self, w: &mut ByteWriter) {
        w.uvarint(self.values);
        w.uvarint(self.nulls);
        self.stat.write(w);
    }

    pub(crate) fn read(r: &mut ByteReader<'_>) -> Result<ZoneMap> {
        let values = r.uvarint()?;
        let nulls = r.uvarint()?;
        if nulls > values {
            return corrupt(format!("zone map with {nulls} nulls among {values} values"));
        }
        Ok(ZoneMap {
            values,
            nulls,
            stat: Stat::read(r)?,
        })
    }

    /// The zone map of no values, which merging leaves unchanged.
    pub const EMPTY: ZoneMap = ZoneMap {
        values: 0,
        nulls: 0,
        stat: Stat::None,
    };

    /// The zone map of both zones' values. A zone with non-null values but no statistic (no
    /// bound is representable, or the type has no order) makes the union's unknown too.
    pub fn merge(&self, other: &ZoneMap) -> ZoneMap {
        let stat = if self.unbounded() || other.unbounded() {
            Stat::None
        } else {
            self.stat.merge(&other.stat)
        };
        ZoneMap {
            values: self.values + other.values,
            nulls: self.nulls + other.nulls,
            stat,
        }
    }

    /// Whether the zone holds non-null values its statistic does not bound.
    fn unbounded(&self) -> bool {
        self.stat == Stat::None && self.nulls < self.values
    }
}

/// `max` as an exclusive bound: itself if it already is one, else the least string above it of
/// at most [`MAX_STAT_BYTES`] bytes (`None` when there is none).
fn exclusive_max(max: &[u8], exact: bool) -> Option<Vec<u8>> {
    match exact {
        false => Some(max.to_vec()),
        true if max.len() < MAX_STAT_BYTES => Some([max, &[0]].concat()),
        true => truncated_upper_bound(max),
    }
}

/// The shortest string of at most [`MAX_STAT_BYTES`] bytes greater than every string starting with
/// the first [`MAX_STAT_BYTES`] bytes of `max`; `None` when those bytes are all 0xff.
fn truncated_upper_bound(max: &[u8]) -> Option<Vec<u8>> {
    let mut prefix = max[..max.len().min(MAX_STAT_BYTES)].to_vec();
    while let Some(last) = prefix.pop() {
        if last < 0xff {
            prefix.push(last + 1);
            return Some(prefix);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_strings_get_bounds_not_values() {
        let long_a = vec![b'a'; 100];
        let long_b = [vec![b'b'; 70], vec![0xff; 30]].concat();
        let Stat::Bytes { min, max, exact } =
            Stat::of_bytes([long_a.as_slice(), long_b.as_slice()].into_iter())
        else {
            panic!("expected bytes stat")
        };
        assert!(!exact);
        assert!(min.as_slice() <= long_a.as_slice());
        assert!(max.as_slice() > long_b.as_slice());
        assert!(max.len() <= MAX_STAT_BYTES);
    }

    /// A merge of an exact and an inexact maximum is inexact, so its maximum must be an
    /// exclusive bound above the exact one: "zz" itself would exclude the value "zz".
    #[test]
    fn merging_exact_and_inexact_strings_keeps_every_value_below_the_max() {
        let short = Stat::of_bytes([b"a".as_slice(), b"zz"].into_iter());
        let long = vec![b'm'; 100];
        let truncated = Stat::of_bytes([long.as_slice()].into_iter());
        for merged in [short.merge(&truncated), truncated.merge(&short)] {
            let Stat::Bytes { max, exact, .. } = &merged else {
                panic!("expected bytes stat, got {merged:?}")
            };
            assert!(!exact);
            assert!(max.as_slice() > b"zz".as_slice(), "{merged:?}");
            assert!(max.as_slice() > long.as_slice());
        }
        let full = vec![0xffu8; MAX_STAT_BYTES];
        let exact_full = Stat::of_bytes([full.as_slice()].into_iter());
        assert_eq!(
            exact_full.merge(&truncated),
            Stat::None,
            "no bound above 64 0xFF bytes"
        );
    }

    #[test]
    fn float_stats_set_nan_aside() {
        let s = Stat::of_floats([1.0, f64::NAN, -2.0].into_iter());
        assert_eq!(
            s,
            Stat::Float {
                min: -2.0,
                max: 1.0,
                has_nan: true
            }
        );
    }

    #[test]
    fn integer_statistics_round_trip_at_the_extremes() {
        for (min, max) in [
            (0, 0),
            (-1, 1),
            (i128::MIN, i128::MAX),
            (i128::MAX, i128::MAX),
            (-5, 1_000_000),
        ] {
            let mut w = ByteWriter::default();
            Stat::Int { min, max }.write(&mut w);
            assert_eq!(
                Stat::read(&mut ByteReader::new(&w.buf, "stat")).unwrap(),
                Stat::Int { min, max }
            );
        }
    }
}
