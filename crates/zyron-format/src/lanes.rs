//! Conversions between Arrow arrays and the streams blocks store (SPEC.md, "Column values").
//!
//! Integer-like types become 64-bit lanes. UInt64 is stored with its top bit flipped so that
//! lane order equals value order (which filters on bit-packed data rely on).

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BooleanArray, PrimitiveArray, StringArray,
    StringViewArray,
};
use arrow::buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::*;

use crate::encodings::{BytesVec, FloatLane};
use crate::error::{FormatError, Result, corrupt};

const U64_FLIP: u64 = 1 << 63;

macro_rules! int_types {
    ($m:ident, $dt:expr, $($args:tt)*) => {
        match $dt {
            DataType::Int8 => $m!(Int8Type, $($args)*),
            DataType::Int16 => $m!(Int16Type, $($args)*),
            DataType::Int32 => $m!(Int32Type, $($args)*),
            DataType::Int64 => $m!(Int64Type, $($args)*),
            DataType::UInt8 => $m!(UInt8Type, $($args)*),
            DataType::UInt16 => $m!(UInt16Type, $($args)*),
            DataType::UInt32 => $m!(UInt32Type, $($args)*),
            DataType::Date32 => $m!(Date32Type, $($args)*),
            DataType::Time64(TimeUnit::Microsecond) => $m!(Time64MicrosecondType, $($args)*),
            DataType::Time64(TimeUnit::Nanosecond) => $m!(Time64NanosecondType, $($args)*),
            DataType::Timestamp(TimeUnit::Second, _) => $m!(TimestampSecondType, $($args)*),
            DataType::Timestamp(TimeUnit::Millisecond, _) => $m!(TimestampMillisecondType, $($args)*),
            DataType::Timestamp(TimeUnit::Microsecond, _) => $m!(TimestampMicrosecondType, $($args)*),
            DataType::Timestamp(TimeUnit::Nanosecond, _) => $m!(TimestampNanosecondType, $($args)*),
            other => return Err(FormatError::Unwritable(format!("{other} is not an integer lane type"))),
        }
    };
}

/// An integer-like array's values as lanes; null slots repeat the previous value so they cost
/// nothing to bit-pack or run-length encode.
pub fn int_lanes(array: &dyn Array) -> Result<Vec<i64>> {
    let mut lanes: Vec<i64> = match array.data_type() {
        DataType::Boolean => array.as_boolean().values().iter().map(i64::from).collect(),
        DataType::UInt64 => array
            .as_primitive::<UInt64Type>()
            .values()
            .iter()
            .map(|v| (v ^ U64_FLIP) as i64)
            .collect(),
        dt => {
            macro_rules! collect {
                ($t:ty,) => {
                    array
                        .as_primitive::<$t>()
                        .values()
                        .iter()
                        .map(|v| *v as i64)
                        .collect()
                };
            }
            int_types!(collect, dt,)
        }
    };
    fill_nulls(&mut lanes, array.logical_nulls().as_ref());
    Ok(lanes)
}

fn fill_nulls<T: Copy + Default>(values: &mut [T], nulls: Option<&NullBuffer>) {
    let Some(nulls) = nulls else { return };
    let mut previous = nulls
        .valid_indices()
        .next()
        .map(|i| values[i])
        .unwrap_or_default();
    for (i, v) in values.iter_mut().enumerate() {
        if nulls.is_valid(i) {
            previous = *v;
        } else {
            *v = previous;
        }
    }
}

/// The logical value of a lane of a column of type `dt` (used for statistics).
pub fn lane_to_logical(dt: &DataType, lane: i64) -> i128 {
    match dt {
        DataType::UInt64 => i128::from((lane as u64) ^ U64_FLIP),
        _ => i128::from(lane),
    }
}

/// The logical range lanes of `dt` represent, and the map from a logical value into a lane.
pub fn lane_domain(dt: &DataType) -> (i128, i128, fn(i128) -> i64) {
    fn identity(v: i128) -> i64 {
        v as i64
    }
    fn flip(v: i128) -> i64 {
        ((v as u64) ^ U64_FLIP) as i64
    }
    match dt {
        DataType::Boolean => (0, 1, identity),
        DataType::Int8 => (i8::MIN.into(), i8::MAX.into(), identity),
        DataType::Int16 => (i16::MIN.into(), i16::MAX.into(), identity),
        DataType::Int32 | DataType::Date32 => (i32::MIN.into(), i32::MAX.into(), identity),
        DataType::UInt8 => (0, u8::MAX.into(), identity),
        DataType::UInt16 => (0, u16::MAX.into(), identity),
        DataType::UInt32 => (0, u32::MAX.into(), identity),
        DataType::UInt64 => (0, u64::MAX.into(), flip),
        _ => (i64::MIN.into(), i64::MAX.into(), identity),
    }
}

/// Builds an integer-like array of type `dt` from lanes, failing on lanes out of the type's range.
pub fn ints_to_array(
    dt: &DataType,
    lanes: Vec<i64>,
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef> {
    Ok(match dt {
        DataType::Boolean => {
            if lanes.iter().any(|v| *v != 0 && *v != 1) {
                return corrupt("boolean lane other than 0 or 1");
            }
            Arc::new(BooleanArray::new(
                lanes.iter().map(|v| *v == 1).collect(),
                nulls,
            ))
        }
        DataType::UInt64 => {
            let values: ScalarBuffer<u64> =
                lanes.into_iter().map(|v| (v as u64) ^ U64_FLIP).collect();
            Arc::new(PrimitiveArray::<UInt64Type>::new(values, nulls))
        }
        DataType::Int64 | DataType::Time64(_) | DataType::Timestamp(_, _) => {
            // These types share Int64's layout: reuse the lanes without a copy.
            let int64 = PrimitiveArray::<Int64Type>::new(ScalarBuffer::from(lanes), nulls);
            arrow::array::make_array(
                int64
                    .into_data()
                    .into_builder()
                    .data_type(dt.clone())
                    .build()?,
            )
        }
        dt => {
            macro_rules! narrow {
                ($t:ty,) => {{
                    type Native = <$t as ArrowPrimitiveType>::Native;
                    // One branch-free pass for the range and one for the cast vectorise;
                    // a checked conversion per value does not. The range pass ORs together
                    // each lane's distance from the type's minimum, shifted past the type's
                    // width: zero exactly when every lane fits. It needs only 64-bit add,
                    // shift and or, which SSE2 has (a 64-bit min and max, which it lacks,
                    // took two thirds of the time of decoding a 32-bit column).
                    let width_bits = 8 * std::mem::size_of::<Native>() as u32;
                    let type_min = Native::MIN as i64;
                    let outside = lanes.iter().fold(0u64, |acc, v| {
                        acc | (v.wrapping_sub(type_min) as u64) >> width_bits
                    });
                    if outside != 0 {
                        let first = lanes.iter().find(|v| Native::try_from(**v).is_err());
                        let v = first.expect("some lane is outside the type");
                        return corrupt(format!("value {v} out of range for {dt}"));
                    }
                    let values: Vec<Native> = lanes.iter().map(|v| *v as Native).collect();
                    Arc::new(
                        PrimitiveArray::<$t>::new(ScalarBuffer::from(values), nulls)
                            .with_data_type(dt.clone()),
                    ) as ArrayRef
                }};
            }
            int_types!(narrow, dt,)
        }
    })
}

/// A 128-bit array's values as (low, high) lanes.
pub fn wide_lanes(array: &dyn Array) -> (Vec<i64>, Vec<i64>) {
    let mut values: Vec<i128> = array.as_primitive::<Decimal128Type>().values().to_vec();
    fill_nulls(&mut values, array.logical_nulls().as_ref());
    values
        .iter()
        .map(|v| (*v as i64, (*v >> 64) as i64))
        .unzip()
}

/// Joins 128-bit values from their halves. `high` may hold a single value standing for every
/// row (a constant upper half, as small decimals have), which saves decoding it row by row.
pub fn wide_values(low: &[i64], high: &[i64]) -> Result<Vec<i128>> {
    let join = |l: i64, h: i64| (i128::from(h) << 64) | i128::from(l as u64);
    Ok(match high {
        [h] => low.iter().map(|l| join(*l, *h)).collect(),
        _ if high.len() == low.len() => low.iter().zip(high).map(|(l, h)| join(*l, *h)).collect(),
        _ => return corrupt("128-bit halves differ in length"),
    })
}

/// Builds a 128-bit array from its halves (see [`wide_values`]).
pub fn wide_to_array(
    dt: &DataType,
    low: &[i64],
    high: &[i64],
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef> {
    let values = wide_values(low, high)?;
    Ok(Arc::new(
        PrimitiveArray::<Decimal128Type>::new(ScalarBuffer::from(values), nulls)
            .with_data_type(dt.clone()),
    ))
}

/// A float array's values.
pub fn float_lanes<F: FloatLane + ArrowNativeType, T: ArrowPrimitiveType<Native = F>>(
    array: &dyn Array,
) -> Vec<F> {
    let mut values = array.as_primitive::<T>().values().to_vec();
    fill_nulls(&mut values, array.logical_nulls().as_ref());
    values
}

/// A string or binary array's values (null slots are empty).
pub fn bytes_lanes(array: &dyn Array) -> Result<BytesVec> {
    let copy = |offsets: &[i32], data: &[u8]| -> BytesVec {
        let base = offsets[0];
        let mut values = BytesVec::default();
        values.offsets = offsets.iter().map(|o| o - base).collect();
        values.data = data[base as usize..*offsets.last().expect("offsets") as usize].to_vec();
        values
    };
    Ok(match array.data_type() {
        DataType::Utf8 => {
            let a = array.as_string::<i32>();
            copy(a.value_offsets(), a.value_data())
        }
        DataType::Binary => {
            let a = array.as_binary::<i32>();
            copy(a.value_offsets(), a.value_data())
        }
        DataType::Utf8View => {
            let a = array.as_string_view();
            let mut out = BytesVec::default();
            for i in 0..a.len() {
                out.push(if a.is_null(i) {
                    b""
                } else {
                    a.value(i).as_bytes()
                })
                .map_err(|e| FormatError::Unwritable(e.to_string()))?;
            }
            out
        }
        other => {
            return Err(FormatError::Unwritable(format!(
                "{other} is not a bytes type"
            )));
        }
    })
}

/// Builds a string or binary array from decoded values. Offsets are checked once here, and
/// UTF-8 with a fast all-ASCII test before the full validation, so Arrow's own checks (which
/// repeat both) are skipped. `Utf8View` gets its views built straight from the offsets, over
/// the same data buffer.
pub fn bytes_to_array(
    dt: &DataType,
    values: BytesVec,
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef> {
    check_offsets(&values)?;
    if matches!(dt, DataType::Utf8 | DataType::Utf8View) {
        check_utf8(&values)?;
    }
    if let Some(n) = &nulls
        && n.len() != values.len()
    {
        return corrupt("validity and values differ in length");
    }
    Ok(match dt {
        DataType::Utf8View => Arc::new(string_views(values, nulls)),
        DataType::Utf8 | DataType::Binary => {
            // SAFETY: check_offsets proved the offsets start at 0, never decrease and end
            // inside the data.
            let offsets =
                unsafe { OffsetBuffer::new_unchecked(ScalarBuffer::from(values.offsets)) };
            let data = values.data.into();
            if *dt == DataType::Utf8 {
                // SAFETY: offsets checked above; check_utf8 proved every value valid UTF-8.
                Arc::new(unsafe { StringArray::new_unchecked(offsets, data, nulls) })
            } else {
                // SAFETY: offsets checked above.
                Arc::new(unsafe { BinaryArray::new_unchecked(offsets, data, nulls) })
            }
        }
        other => return corrupt(format!("{other} read as bytes")),
    })
}

fn check_offsets(values: &BytesVec) -> Result<()> {
    let o = &values.offsets;
    let ordered = o.windows(2).fold(true, |ok, w| ok & (w[0] <= w[1]));
    if o.first() != Some(&0) || !ordered || *o.last().unwrap_or(&0) as usize > values.data.len() {
        return corrupt("string offsets out of order");
    }
    Ok(())
}

/// Every value is valid UTF-8: all-ASCII data needs no more (every byte is a character
/// boundary); otherwise the whole buffer and each boundary are checked.
fn check_utf8(values: &BytesVec) -> Result<()> {
    if values.unchecked_tail().is_ascii() {
        return Ok(());
    }
    let text = std::str::from_utf8(&values.data)
        .map_err(|e| FormatError::Corrupt(format!("string data is not UTF-8: {e}")))?;
    if values
        .offsets
        .iter()
        .any(|o| !text.is_char_boundary(*o as usize))
    {
        return corrupt("a string boundary splits a UTF-8 character");
    }
    Ok(())
}

/// `dt` with every `Utf8` in it, at any depth, as `Utf8View`: what a scan asked for string
/// views returns (see `ScanOptions::string_views`).
pub fn with_string_views(dt: &DataType) -> DataType {
    match dt {
        DataType::Utf8 => DataType::Utf8View,
        DataType::List(field) => DataType::List(Arc::new(field_with_string_views(field))),
        DataType::Struct(fields) => {
            DataType::Struct(fields.iter().map(|f| field_with_string_views(f)).collect())
        }
        other => other.clone(),
    }
}

fn field_with_string_views(field: &Field) -> Field {
    field
        .clone()
        .with_data_type(with_string_views(field.data_type()))
}

/// `schema` with [`with_string_views`] applied to every field; metadata kept.
pub fn schema_with_string_views(schema: &Schema) -> Schema {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| field_with_string_views(f))
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// Views over `values.data` (checked by the caller), inline for values of up to 12 bytes.
fn string_views(values: BytesVec, nulls: Option<NullBuffer>) -> StringViewArray {
    let (views, long) = views_of(&values);
    views_array(views, long, values, nulls)
}

/// Bytes a view holds inline; longer values are referenced in a buffer.
const VIEW_INLINE_BYTES: usize = 12;

/// One view per value of `values` (offsets checked by the caller), pointing into buffer 0 =
/// `values.data`, and whether any value is too long to be inline (the buffer is then kept).
fn views_of(values: &BytesVec) -> (Vec<u128>, bool) {
    let (data, offsets) = (&values.data, &values.offsets);
    if offsets.len() < 2 {
        return (Vec::new(), false);
    }
    let count = offsets.len() - 1;
    // Values that start at least 16 bytes before the end of the data (all but the last few)
    // are read 16 bytes at once; offsets ascend, so they come first.
    let wide = offsets[..count].partition_point(|&start| start as usize + 16 <= data.len());
    let mut views = Vec::with_capacity(count);
    views.extend(offsets[..=wide].windows(2).map(|w| {
        let (start, end) = (w[0] as usize, w[1] as usize);
        debug_assert!(start + 16 <= data.len());
        // SAFETY: `start + 16 <= data.len()`, by the partition above.
        let head = unsafe { data.as_ptr().add(start).cast::<u128>().read_unaligned() };
        view_from(u128::from_le(head), start, end - start)
    }));
    views.extend(offsets[wide..].windows(2).map(|w| {
        let (start, end) = (w[0] as usize, w[1] as usize);
        arrow::array::builder::make_view(&data[start..end], 0, start as u32)
    }));
    // Apart from the views: a length tracked in the loops above went through memory per view.
    let long = offsets
        .windows(2)
        .map(|w| (w[1] - w[0]) as usize)
        .any(|len| len > VIEW_INLINE_BYTES);
    (views, long)
}

/// The view of the `len` bytes at `start` in buffer 0, as `make_view` makes it, from the 16
/// bytes read at `start` at once: `make_view`'s call and copy of a slice of variable length
/// made building views a fifth of the time of scanning an FSST column as views. (A
/// branch-free form, computing both cases and masking, was 8% slower on TPC-H's `l_comment`.)
#[inline(always)]
fn view_from(head: u128, start: usize, len: usize) -> u128 {
    if len > VIEW_INLINE_BYTES {
        let prefix = head as u32 as u128;
        len as u128 | prefix << 32 | (start as u128) << 96
    } else {
        let inline = head & ((1u128 << (8 * len)) - 1);
        len as u128 | inline << 32
    }
}

/// A `Utf8View` array of `views` into `data`'s bytes (checked by the caller); the buffer is
/// kept only if some value is `long`, too long to be inline.
fn views_array(
    views: Vec<u128>,
    long: bool,
    data: BytesVec,
    nulls: Option<NullBuffer>,
) -> StringViewArray {
    let buffers = if long {
        vec![arrow::buffer::Buffer::from_vec(data.data)]
    } else {
        vec![]
    };
    // SAFETY: every view was made by make_view from a valid UTF-8 value (checked by the
    // caller) that lies inside buffer 0.
    unsafe { StringViewArray::new_unchecked(ScalarBuffer::from(views), buffers, nulls) }
}

/// A `Utf8View` array gathered from a dictionary by code: one 16-byte view per row pointing
/// into the dictionary's values, so no string byte is copied. Codes must be in range.
pub fn dictionary_views(
    dictionary: BytesVec,
    codes: &[i64],
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef> {
    check_offsets(&dictionary)?;
    check_utf8(&dictionary)?;
    if nulls.as_ref().is_some_and(|n| n.len() != codes.len()) {
        return corrupt("validity and values differ in length");
    }
    let (distinct, long) = views_of(&dictionary);
    let views = codes.iter().map(|c| distinct[*c as usize]).collect();
    Ok(Arc::new(views_array(views, long, dictionary, nulls)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Narrow integer types take every lane from their minimum to their maximum and refuse
    /// the lanes just past either end (a corrupt file's), whatever the width and sign.
    #[test]
    fn narrowing_accepts_the_whole_range_and_nothing_past_it() {
        let cases: [(DataType, i64, i64); 7] = [
            (DataType::Int8, i8::MIN.into(), i8::MAX.into()),
            (DataType::UInt8, 0, u8::MAX.into()),
            (DataType::Int16, i16::MIN.into(), i16::MAX.into()),
            (DataType::UInt16, 0, u16::MAX.into()),
            (DataType::Int32, i32::MIN.into(), i32::MAX.into()),
            (DataType::UInt32, 0, u32::MAX.into()),
            (DataType::Date32, i32::MIN.into(), i32::MAX.into()),
        ];
        for (dt, min, max) in cases {
            let array = ints_to_array(&dt, vec![min, 0, max], None).unwrap();
            assert_eq!(int_lanes(&array).unwrap(), vec![min, 0, max], "{dt}");
            for outside in [min - 1, max + 1, i64::MIN, i64::MAX] {
                let err = ints_to_array(&dt, vec![0, outside, 1], None).unwrap_err();
                assert!(
                    err.to_string()
                        .contains(&format!("value {outside} out of range")),
                    "{dt}: {err}"
                );
            }
        }
    }

    /// Views read 16 bytes at once wherever they can; they equal arrow's `make_view` for
    /// every length up to past the inline limit, at every distance from the buffer's end.
    #[test]
    fn views_equal_arrows_for_every_length_and_position() {
        let data: Vec<u8> = (0..64u8).map(|i| b'a' + i % 26).collect();
        for start in 0..data.len() {
            for end in start..=data.len().min(start + 20) {
                let expected = arrow::array::builder::make_view(&data[start..end], 0, start as u32);
                let mut value = BytesVec::default();
                value.offsets = vec![start as i32, end as i32];
                value.data = data.clone();
                assert_eq!(views_of(&value).0, [expected], "{start}..{end}");
            }
        }
    }

    /// A view array keeps its buffer exactly when some value is longer than a view holds.
    #[test]
    fn views_keep_the_buffer_only_for_long_values() {
        let mut short = BytesVec::default();
        for value in ["", "a", "twelve bytes"] {
            short.push(value.as_bytes()).unwrap();
        }
        assert!(!views_of(&short).1);
        short.push(b"thirteen byte").unwrap();
        let (views, long) = views_of(&short);
        assert!(long);
        assert_eq!(
            views_array(views, long, short, None).value(3),
            "thirteen byte"
        );
    }
}
