//! ALP (Adaptive Lossless floating-Point, Afroozeh et al., SIGMOD 2023): a float that is a
//! decimal in disguise, such as 12.34, is stored as the integer `round(v * 10^e / 10^f)` and
//! rebuilt as `n * 10^f / 10^e` (a correctly rounded division). The exponents `e` and `f` are chosen per stream on a sample;
//! values that do not survive the round trip bit for bit (NaN, -0.0, too many digits) are kept
//! aside as exceptions. The integers cascade (usually into frame-of-reference bit-packing).
//!
//! Body: `e: u8 | f: u8 | integers node (len values) | exceptions: uvarint |
//! positions node (exceptions values, if any) | exceptions raw little-endian values`.

use std::ops::Range;

use super::bitpacked::{Lane, Packed};
use super::{
    Cascade, Encoding, EncodingId, Floats, Ints, decode_all, decode_stream, encode_stream,
    read_child, write_child,
};
use crate::error::{Result, corrupt};
use crate::io::{ByteReader, ByteWriter};
use crate::simd::avx2_dispatch;

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
pub trait FloatLane:
    Copy
    + Default
    + PartialEq
    + Send
    + Sync
    + std::fmt::Debug
    + std::ops::Add<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + 'static
{
    const BYTES: usize;
    /// Largest ALP exponent for this width.
    const MAX_EXPONENT: u8;
    /// Integers below `2^EXACT_BITS` in magnitude convert exactly through `from_exact`.
    const EXACT_BITS: u8;
    /// `n as Self` for `|n| < 2^EXACT_BITS`: adds `n` to the bits of `1.5 * 2^mantissa_bits`
    /// (a float whose last place is worth 1) and subtracts that float. Baseline x86-64 has no
    /// vector conversion from 64-bit integers; an integer add and a float subtraction vectorise.
    fn from_exact(n: i64) -> Self;
    /// `(10^f, 10^e)`: `alp_decode(n)` is `n * 10^f / 10^e`.
    fn alp_factors(e: u8, f: u8) -> (Self, Self);
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
    const EXACT_BITS: u8 = 51;
    #[inline]
    fn from_exact(n: i64) -> Self {
        debug_assert!(n.unsigned_abs() < 1 << Self::EXACT_BITS);
        f64::from_bits(0x4338_0000_0000_0000u64.wrapping_add(n as u64)) - 6_755_399_441_055_744.0
    }
    fn alp_factors(e: u8, f: u8) -> (Self, Self) {
        (F10_F64[f as usize], F10_F64[e as usize])
    }
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
    const EXACT_BITS: u8 = 22;
    #[inline]
    fn from_exact(n: i64) -> Self {
        debug_assert!(n.unsigned_abs() < 1 << Self::EXACT_BITS);
        f32::from_bits(0x4B40_0000u32.wrapping_add(n as u32)) - 12_582_912.0
    }
    fn alp_factors(e: u8, f: u8) -> (Self, Self) {
        (F10_F32[f as usize], F10_F32[e as usize])
    }
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
        let first = out.len();
        if !decode_packed(ints_node, len, &rows, (e, f), out)? {
            let mut ints = Vec::with_capacity(rows.len());
            decode_stream::<Ints>(ints_node, len, rows.clone(), &mut ints)?;
            ints_to_floats(&ints, (e, f), out);
        }
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

avx2_dispatch! {
    /// Appends `alp_decode(n)` for each integer, through the vectorised `from_exact` where
    /// every integer is narrow enough (one pass of ORs decides).
    fn ints_to_floats<F: FloatLane>(ints: &[i64], factors: (u8, u8), out: &mut Vec<F>)
        => ints_to_floats_kernel
}

#[inline(always)]
fn ints_to_floats_kernel<F: FloatLane>(ints: &[i64], (e, f): (u8, u8), out: &mut Vec<F>) {
    let widest = ints.iter().fold(0, |acc, n| acc | n.unsigned_abs());
    if widest < 1 << F::EXACT_BITS {
        let (scale, divisor) = F::alp_factors(e, f);
        out.extend(ints.iter().map(|n| F::from_exact(*n) * scale / divisor));
    } else {
        out.extend(ints.iter().map(|n| F::alp_decode(*n, e, f)));
    }
}

avx2_dispatch! {
    /// Appends `alp_decode(reference + offset)` for each offset; the caller has checked that
    /// every sum is narrow enough for `from_exact`.
    fn offsets_to_floats<F: FloatLane, T: Lane>(
        offsets: &[T],
        reference: i64,
        factors: (F, F),
        out: &mut Vec<F>,
    ) => offsets_to_floats_kernel
}

#[inline(always)]
fn offsets_to_floats_kernel<F: FloatLane, T: Lane>(
    offsets: &[T],
    reference: i64,
    (scale, divisor): (F, F),
    out: &mut Vec<F>,
) {
    out.extend(
        offsets
            .iter()
            .map(|o| F::from_exact(reference + o.lane_to_u64() as i64) * scale / divisor),
    );
}

/// Decodes ALP integers stored as bit-packed offsets in one pass per vector, with no i64
/// buffer in between. The result equals `alp_decode` bit for bit: every integer is narrow
/// enough for `from_exact`. Returns false, having written nothing, for other integer
/// encodings, for single rows (which unpack one value alone) and for integers too wide.
fn decode_packed<F: FloatLane>(
    ints_node: &[u8],
    len: usize,
    rows: &Range<usize>,
    (e, f): (u8, u8),
    out: &mut Vec<F>,
) -> Result<bool> {
    let Some(packed) = Packed::of_node(ints_node, len)? else {
        return Ok(false);
    };
    let widest = u128::from(packed.reference.unsigned_abs()) + (1u128 << packed.width) - 1;
    if packed.width == 0 || widest >= 1 << F::EXACT_BITS || rows.len() < 2 {
        return Ok(false);
    }
    let factors = F::alp_factors(e, f);
    // `widest` caps the width at EXACT_BITS, so u64 lanes hold 33- to 51-bit offsets.
    if packed.width <= 32 {
        packed.for_each_vector::<u32>(rows, |o| {
            offsets_to_floats(o, packed.reference, factors, out)
        });
    } else {
        packed.for_each_vector::<u64>(rows, |o| {
            offsets_to_floats(o, packed.reference, factors, out)
        });
    }
    Ok(true)
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

    /// Whether a body's integers take `decode_packed`'s one-pass path for a full decode.
    fn takes_packed_path<F: FloatLane>(body: &[u8], len: usize) -> bool {
        let mut r = ByteReader::new(body, "test");
        let (e, f) = (r.u8().unwrap(), r.u8().unwrap());
        let node = read_child(&mut r).unwrap();
        decode_packed::<F>(node, len, &(0..len), (e, f), &mut Vec::new()).unwrap()
    }

    /// Every row range of every integer path (packed offsets in u32 or u64 lanes, other
    /// encodings, integers too wide for `from_exact`) decodes bit for bit.
    fn assert_ranges_round_trip<F: FloatLane>(values: &[F], packed: bool) {
        let body = <Alp as Encoding<Floats<F>>>::encode(values, Cascade::TOP).unwrap();
        assert_eq!(takes_packed_path::<F>(&body, values.len()), packed);
        let n = values.len();
        for rows in [0..n, 5..2000, 1023..1025, 1500..1501, n - 3..n] {
            let mut out = Vec::new();
            <Alp as Encoding<Floats<F>>>::decode(&body, n, rows.clone(), &mut out).unwrap();
            let bits = |v: &[F]| v.iter().map(|x| x.to_bits64()).collect::<Vec<_>>();
            assert_eq!(bits(&out), bits(&values[rows.clone()]), "rows {rows:?}");
        }
    }

    #[test]
    fn every_integer_path_decodes_bit_for_bit() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n) as i64
        };
        // Negative six-decimal coordinates: offsets in u32 lanes.
        let lat: Vec<f64> = (0..3000)
            .map(|_| (next(180_000_000) - 90_000_000) as f64 / 1e6)
            .collect();
        assert_ranges_round_trip(&lat, true);
        // Integers of about 2^45: offsets in u64 lanes.
        let wide: Vec<f64> = (0..3000)
            .map(|_| (next(1 << 45) - (1 << 44)) as f64 / 1e3)
            .collect();
        assert_ranges_round_trip(&wide, true);
        // Integers past 2^51 convert one by one.
        let huge: Vec<f64> = (0..3000)
            .map(|_| (next(1 << 52) + (1 << 52)) as f64)
            .collect();
        assert_ranges_round_trip(&huge, false);
        // A slow walk: the integers cascade into delta, not straight into bit-packing.
        let mut walk = 1_000_000;
        let counter: Vec<f64> = (0..3000).map(|i| (i * 3 + next(3)) as f64).collect();
        assert_ranges_round_trip(&counter, false);
        let temperatures: Vec<f32> = (0..3000)
            .map(|_| {
                walk += next(21) - 10;
                walk.rem_euclid(600) as f32 / 10.0
            })
            .collect();
        assert_ranges_round_trip(&temperatures, false);
        // f32 integers past 2^22, and negative ones that fit.
        let big: Vec<f32> = (0..3000)
            .map(|_| (next(3_000_000) + 5_000_000) as f32)
            .collect();
        assert_ranges_round_trip(&big, false);
        let small: Vec<f32> = (0..3000)
            .map(|_| (next(200_000) - 100_000) as f32 / 100.0)
            .collect();
        assert_ranges_round_trip(&small, true);
    }

    /// The bits of both conversions' outputs: through the dispatch and through the kernel.
    fn both_conversions<F: FloatLane>(ints: &[i64], factors: (u8, u8)) -> [Vec<u64>; 2] {
        let (mut dispatched, mut baseline) = (Vec::<F>::new(), Vec::new());
        ints_to_floats(ints, factors, &mut dispatched);
        ints_to_floats_kernel(ints, factors, &mut baseline);
        [dispatched, baseline].map(|v| v.iter().map(|f| f.to_bits64()).collect())
    }

    /// The AVX2 copies the dispatch picks on this machine give the bits the baseline
    /// kernels give, so a file reads the same on every x86-64 CPU.
    #[test]
    fn dispatched_kernels_match_the_baseline_bit_for_bit() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for (e, f) in [(0, 0), (1, 0), (2, 0), (6, 0), (10, 0), (14, 2), (18, 8)] {
            for bits in [10, 21, 40, 63] {
                let ints: Vec<i64> = (0..4099)
                    .map(|_| (next() >> (64 - bits)) as i64 - (1 << (bits - 1)))
                    .collect();
                let [dispatched, baseline] = both_conversions::<f64>(&ints, (e, f));
                assert_eq!(dispatched, baseline, "f64 e={e} f={f} bits={bits}");
                if e <= f32::MAX_EXPONENT {
                    let [dispatched, baseline] = both_conversions::<f32>(&ints, (e, f));
                    assert_eq!(dispatched, baseline, "f32 e={e} f={f} bits={bits}");
                }
            }
            let offsets: Vec<u32> = (0..1024).map(|_| next() as u32 >> 12).collect();
            let factors = f64::alp_factors(e, f);
            let (mut dispatched, mut baseline) = (Vec::<f64>::new(), Vec::new());
            offsets_to_floats(&offsets, -(1 << 19), factors, &mut dispatched);
            offsets_to_floats_kernel(&offsets, -(1 << 19), factors, &mut baseline);
            let bits = |v: &[f64]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&dispatched), bits(&baseline), "offsets e={e} f={f}");
        }
    }
}
