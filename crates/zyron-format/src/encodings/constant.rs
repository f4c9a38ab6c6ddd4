//! Constant: every value is the same; the body is that one value.

use std::ops::Range;

use super::{Bytes, BytesRef, BytesVec, Cascade, Encoding, EncodingId, FloatLane, Floats, Ints};
use crate::error::{Result, corrupt};
use crate::predicate::{BytesMatcher, FloatMatcher, IntMatcher};

pub struct Constant;

fn all_equal<T: PartialEq>(mut values: impl Iterator<Item = T>) -> Option<T> {
    let first = values.next()?;
    values.all(|v| v == first).then_some(first)
}

impl Encoding<Ints> for Constant {
    const ID: EncodingId = EncodingId::CONSTANT;
    fn encode(values: &[i64], _: Cascade) -> Option<Vec<u8>> {
        all_equal(values.iter().copied()).map(|v| v.to_le_bytes().to_vec())
    }
    fn decode(body: &[u8], _len: usize, rows: Range<usize>, out: &mut Vec<i64>) -> Result<()> {
        let v = int_value(body)?;
        out.extend(std::iter::repeat_n(v, rows.len()));
        Ok(())
    }
    fn filter(
        body: &[u8],
        _len: usize,
        rows: Range<usize>,
        m: &IntMatcher,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        let hit = m.matches(int_value(body)?);
        out.extend(std::iter::repeat_n(hit, rows.len()));
        Ok(())
    }
}

fn int_value(body: &[u8]) -> Result<i64> {
    match <[u8; 8]>::try_from(body) {
        Ok(b) => Ok(i64::from_le_bytes(b)),
        Err(_) => corrupt(format!("constant integer body of {} bytes", body.len())),
    }
}

impl<F: FloatLane> Encoding<Floats<F>> for Constant {
    const ID: EncodingId = EncodingId::CONSTANT;
    fn encode(values: &[F], _: Cascade) -> Option<Vec<u8>> {
        let v = all_equal(values.iter().map(|v| v.to_bits64()))?;
        let mut out = Vec::new();
        F::from_bits64(v).write_le(&mut out);
        Some(out)
    }
    fn decode(body: &[u8], _len: usize, rows: Range<usize>, out: &mut Vec<F>) -> Result<()> {
        let v = float_value::<F>(body)?;
        out.extend(std::iter::repeat_n(v, rows.len()));
        Ok(())
    }
    fn filter(
        body: &[u8],
        _len: usize,
        rows: Range<usize>,
        m: &FloatMatcher,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        let hit = m.matches(float_value::<F>(body)?.to_f64());
        out.extend(std::iter::repeat_n(hit, rows.len()));
        Ok(())
    }
}

fn float_value<F: FloatLane>(body: &[u8]) -> Result<F> {
    if body.len() != F::BYTES {
        return corrupt(format!("constant float body of {} bytes", body.len()));
    }
    Ok(F::from_le(body))
}

impl Encoding<Bytes> for Constant {
    const ID: EncodingId = EncodingId::CONSTANT;
    fn encode(values: BytesRef<'_>, _: Cascade) -> Option<Vec<u8>> {
        all_equal(values.iter()).map(<[u8]>::to_vec)
    }
    fn decode(body: &[u8], _len: usize, rows: Range<usize>, out: &mut BytesVec) -> Result<()> {
        if body.len().saturating_mul(rows.len()) > i32::MAX as usize {
            return corrupt("constant strings exceed 2 GiB");
        }
        for _ in rows {
            out.push(body)?;
        }
        Ok(())
    }
    fn filter(
        body: &[u8],
        _len: usize,
        rows: Range<usize>,
        m: &BytesMatcher,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        let hit = m.matches(body);
        out.extend(std::iter::repeat_n(hit, rows.len()));
        Ok(())
    }
}
