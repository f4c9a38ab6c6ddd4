//! ALP (Adaptive Lossless floating-Point, Afroozeh et al., SIGMOD 2023): a float that is a
//! decimal in disguise, such as 12.34, is stored as the integer `round(v * 10^e / 10^f)` and
//! rebuilt as `n * 10^f / 10^e` (a correctly rounded division). The exponents `e` and `f` are chosen per stream on a sample;
//! values that do not survive the round trip bit for bit (NaN, -0.0, too many digits) are kept
//! aside as exceptions. The integers cascade (usually into frame-of-reference bit-packing).
//!
//! Body: `e: u8 | f: u8 | integers node (len values) | exceptions: uvarint |
//! positions node (exceptions values, if any) | exceptions raw little-endian values`.

use std::ops::Range;

use super::{
    Cascade, Encoding, EncodingId, Floats, Ints, decode_all, decode_stream, encode_stream,
    read_child, write_child,
};
use crate::error::{Result, corrupt};
use crate::io::{ByteReader, ByteWriter};

pub struct Alp;

const F10_F64: [f64; 19] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18,
];
const IF10_F64: [f64; 19] = [
    1e0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12, 1e-13, 1e-14,
    1e-15, 1e-16, 1e-17, 1e-18,
];
const F10_F32: [f32; 11] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10];
const IF10_F32: [f32; 11] = [
    1e0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10,
];

/// A float width the format stores (`f32` or `f64`).
pub trait FloatLane: Copy + Default + PartialEq + Send + Sync + std::fmt::Debug + 'static {
    const BYTES: usize;
    /// Largest ALP exponent for this width.
    const MAX_EXPONENT: u8;
    fn to_f64(self) -> f64;
    fn from_le(bytes: &[u8]) -> Self;
    fn write_le(self, out: &mut Vec<u8>);
    fn to_bits64(self) -> u64;
    fn from_bits64(bits: u64) -> Self;
    /// `round(self * 10^e / 10^f)` if that integer decodes back to exactly `self`.
    fn alp_encode(self, e: u8, f: u8) -> Option<i64>;
    fn alp_decode(n: i64, e: u8, f: u8) -> Self;
}

impl FloatLane for f64 {
    const BYTES: usize = 8;
    const MAX_EXPONENT: u8 = 18;
    fn to_f64(self) -> f64 {
        self
    }
    fn from_le(b: &[u8]) -> Self {
        f64::from_le_bytes(b.try_into().expect("8 bytes"))
    }
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn to_bits64(self) -> u64 {
        self.to_bits()
    }
    fn from_bits64(bits: u64) -> Self {
        f64::from_bits(bits)
    }
    #[inline]
    fn alp_encode(self, e: u8, f: u8) -> Option<i64> {
        let scaled = self * F10_F64[e as usize] * IF10_F64[f as usize];
        if !(scaled.abs() < 9.0e15) {
            return None;
        }
        let n = scaled.round() as i64;
        (Self::alp_decode(n, e, f).to_bits() == self.to_bits()).then_some(n)
    }
    #[inline]
    fn alp_decode(n: i64, e: u8, f: u8) -> Self {
        // Dividing by the exact power of ten rounds correctly, so a decimal parsed from text
        // (the nearest double to it) comes back bit for bit; multiplying by 10^-e would not.
        n as f64 * F10_F64[f as usize] / F10_F64[e as usize]
    }
}

impl FloatLane for f32 {
    const BYTES: usize = 4;
    const MAX_EXPONENT: u8 = 10;
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_le(b: &[u8]) -> Self {
        f32::from_le_bytes(b.try_into().expect("4 bytes"))
    }
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn to_bits64(self) -> u64 {
        u64::from(self.to_bits())
    }
    fn from_bits64(bits: u64) -> Self {
        f32::from_bits(bits as u32)
    }
    #[inline]
    fn alp_encode(self, e: u8, f: u8) -> Option<i64> {
        let scaled = self * F10_F32[e as usize] * IF10_F32[f as usize];
        if !(scaled.abs() < 8.0e6) {
            return None;
        }
        let n = scaled.round() as i64;
        (Self::alp_decode(n, e, f).to_bits() == self.to_bits()).then_some(n)
    }
    #[inline]
    fn alp_decode(n: i64, e: u8, f: u8) -> Self {
        n as f32 * F10_F32[f as usize] / F10_F32[e as usize]
    }
}

/// The (e, f) pair with the fewest exceptions on up to 256 evenly spread values.
fn choose_exponents<F: FloatLane>(values: &[F]) -> (u8, u8) {
    let step = (values.len() / 256).max(1);
    let sample: Vec<F> = values.iter().step_by(step).copied().collect();
    let mut best = (0, 0, usize::MAX);
    for e in 0..=F::MAX_EXPONENT {
        for f in 0..=e {
            let exceptions = sample
                .iter()
                .filter(|v| v.alp_encode(e, f).is_none())
                .count();
            // Ties go to the smallest e - f, which gives the narrowest integers.
            if exceptions < best.2 || (exceptions == best.2 && e - f < best.0 - best.1) {
                best = (e, f, exceptions);
            }
        }
    }
    (best.0, best.1)
}

impl<F: FloatLane> Encoding<Floats<F>> for Alp {
    const ID: EncodingId = EncodingId::ALP;
    fn encode(values: &[F], cascade: Cascade) -> Option<Vec<u8>> {
        if values.is_empty() {
            return None;
        }
        let (e, f) = choose_exponents(values);
        let mut ints = Vec::with_capacity(values.len());
        let mut positions = Vec::new();
        let mut exceptions = Vec::new();
        let mut filler = 0;
        for (i, v) in values.iter().enumerate() {
            match v.alp_encode(e, f) {
                Some(n) => {
                    filler = n;
                    ints.push(n);
                }
                None => {
                    positions.push(i as i64);
                    v.write_le(&mut exceptions);
                    ints.push(filler);
                }
            }
        }
        if positions.len() > values.len() / 4 {
            return None;
        }
        let mut w = ByteWriter::default();
        w.u8(e);
        w.u8(f);
        write_child(&mut w, &encode_stream::<Ints>(&ints, cascade.child()));
        w.uvarint(positions.len() as u64);
        if !positions.is_empty() {
            write_child(&mut w, &encode_stream::<Ints>(&positions, cascade.child()));
        }
        w.buf.extend_from_slice(&exceptions);
        Some(w.buf)
    }

    fn decode(body: &[u8], len: usize, rows: Range<usize>, out: &mut Vec<F>) -> Result<()> {
        let mut r = ByteReader::new(body, "ALP stream");
        let (e, f) = (r.u8()?, r.u8()?);
        if e > F::MAX_EXPONENT || f > e {
            return corrupt(format!("ALP exponents e={e} f={f}"));
        }
        let ints_node = read_child(&mut r)?;
        let exception_count = r.uvarint_max(len as u64, "exception count")?;
        let mut ints = Vec::with_capacity(rows.len());
        decode_stream::<Ints>(ints_node, len, rows.clone(), &mut ints)?;
        let first = out.len();
        out.extend(ints.iter().map(|n| F::alp_decode(*n, e, f)));
        if exception_count == 0 {
            return Ok(());
        }
        let positions = decode_all::<Ints>(read_child(&mut r)?, exception_count)?;
        let raw = r.take(exception_count * F::BYTES)?;
        let from = positions.partition_point(|p| *p < rows.start as i64);
        for (k, p) in positions.iter().enumerate().skip(from) {
            if *p >= rows.end as i64 {
                break;
            }
            if *p < 0 || (k > 0 && positions[k - 1] >= *p) {
                return corrupt("ALP exception positions out of order");
            }
            out[first + (*p as usize - rows.start)] =
                F::from_le(&raw[k * F::BYTES..(k + 1) * F::BYTES]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_round_trip_and_odd_values_become_exceptions() {
        let mut values: Vec<f64> = (0..3000).map(|i| (i as f64) * 0.01 + 100.0).collect();
        values[7] = f64::NAN;
        values[100] = -0.0;
        values[2000] = std::f64::consts::PI;
        let body = <Alp as Encoding<Floats<f64>>>::encode(&values, Cascade::TOP).unwrap();
        assert!(
            body.len() < values.len() * 3,
            "ALP should shrink two-decimal prices, got {} bytes",
            body.len()
        );
        let mut out = Vec::new();
        <Alp as Encoding<Floats<f64>>>::decode(&body, values.len(), 0..values.len(), &mut out)
            .unwrap();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&out), bits(&values));
        let mut one = Vec::new();
        <Alp as Encoding<Floats<f64>>>::decode(&body, values.len(), 2000..2001, &mut one).unwrap();
        assert_eq!(one[0], std::f64::consts::PI);
    }

    #[test]
    fn two_decimal_prices_encode_without_exceptions() {
        let values: Vec<f64> = (0..3000i64)
            .map(|i| ((i * 7919) % 100_000 + 90_000) as f64 / 100.0)
            .collect();
        let (e, f) = choose_exponents(&values);
        let exceptions = values
            .iter()
            .filter(|v| v.alp_encode(e, f).is_none())
            .count();
        assert_eq!(exceptions, 0, "e={e} f={f}");
        let body = <Alp as Encoding<Floats<f64>>>::encode(&values, Cascade::TOP).unwrap();
        // 900.00..1899.99 as integers needs 17 bits.
        assert!(body.len() <= 3072 * 17 / 8 + 16, "{} bytes", body.len());
    }
}
