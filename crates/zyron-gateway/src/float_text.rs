//! Floats in PostgreSQL's text format (`float8out` and `float4out` with the
//! default `extra_float_digits = 1`): the shortest digits that read back as
//! the same value, in fixed notation for decimal exponents from -4 up to 14
//! (`real`: up to 5) and otherwise as `1.5e+20` with at least two exponent
//! digits; `Infinity`, `-Infinity` and `NaN` spelled out. pgwire's text
//! encoder writes Rust's spelling (`1e20`, `inf`, `1000000000000000.0`).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Float32Type, Float64Type, Schema};
use datafusion::arrow::error::ArrowError;
use pgwire::api::results::{FieldFormat, FieldInfo};

/// `batch` with every float column sent in text format replaced by its text.
pub fn floats_as_text(batch: RecordBatch, fields: &[FieldInfo]) -> Result<RecordBatch, ArrowError> {
    let is_text_float = |(column, field): (&ArrayRef, &FieldInfo)| {
        matches!(column.data_type(), DataType::Float32 | DataType::Float64)
            && field.format() == FieldFormat::Text
    };
    if !batch.columns().iter().zip(fields).any(is_text_float) {
        return Ok(batch);
    }
    let schema = batch.schema();
    let mut columns = Vec::with_capacity(batch.num_columns());
    let mut schema_fields = Vec::with_capacity(batch.num_columns());
    for ((column, field), pg_field) in batch.columns().iter().zip(schema.fields()).zip(fields) {
        if is_text_float((column, pg_field)) {
            columns.push(Arc::new(texts(column)) as ArrayRef);
            schema_fields.push(Arc::new(Field::new(
                field.name(),
                DataType::Utf8,
                field.is_nullable(),
            )));
        } else {
            columns.push(column.clone());
            schema_fields.push(field.clone());
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(schema_fields)), columns)
}

fn texts(column: &ArrayRef) -> StringArray {
    match column.data_type() {
        DataType::Float32 => column
            .as_primitive::<Float32Type>()
            .iter()
            .map(|v| v.map(float4_text))
            .collect(),
        _ => column
            .as_primitive::<Float64Type>()
            .iter()
            .map(|v| v.map(float8_text))
            .collect(),
    }
}

/// A `double precision` as PostgreSQL prints it.
pub fn float8_text(value: f64) -> String {
    special(value).unwrap_or_else(|| shortest(&format!("{value:e}"), 15))
}

/// A `real` as PostgreSQL prints it.
pub fn float4_text(value: f32) -> String {
    special(value as f64).unwrap_or_else(|| shortest(&format!("{value:e}"), 6))
}

fn special(value: f64) -> Option<String> {
    if value.is_nan() {
        Some("NaN".to_owned())
    } else if value.is_infinite() {
        Some(if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned())
    } else {
        None
    }
}

/// Rust's shortest scientific form (`-1.25e17`) laid out as PostgreSQL lays
/// it out: fixed below decimal exponent `fixed_below`, scientific above.
fn shortest(scientific: &str, fixed_below: i32) -> String {
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("`{:e}` always writes an exponent");
    let exponent: i32 = exponent.parse().expect("an integer exponent");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let body = if (-4..fixed_below).contains(&exponent) {
        fixed(&digits, exponent)
    } else {
        let (first, rest) = digits.split_at(1);
        let point = if rest.is_empty() { "" } else { "." };
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        format!("{first}{point}{rest}e{exponent_sign}{:02}", exponent.abs())
    };
    format!("{sign}{body}")
}

/// `digits` with the first at decimal position `exponent`, without exponent.
fn fixed(digits: &str, exponent: i32) -> String {
    if exponent < 0 {
        let zeros = "0".repeat((-exponent - 1) as usize);
        return format!("0.{zeros}{digits}");
    }
    let whole_len = exponent as usize + 1;
    if digits.len() <= whole_len {
        format!("{digits}{}", "0".repeat(whole_len - digits.len()))
    } else {
        format!("{}.{}", &digits[..whole_len], &digits[whole_len..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_print_as_postgresql_prints_them() {
        let cases = [
            (1e20, "1e+20"),
            (1e15, "1e+15"),
            (1e14, "100000000000000"),
            (1e-5, "1e-05"),
            (1e-4, "0.0001"),
            (0.1 + 0.2, "0.30000000000000004"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (-1.5, "-1.5"),
            (0.0, "0"),
            (-0.0, "-0"),
            (1000.0, "1000"),
            (1e-320, "1e-320"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
            (f64::NAN, "NaN"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
        ];
        for (value, text) in cases {
            assert_eq!(float8_text(value), text, "{value:e}");
        }
    }

    #[test]
    fn reals_print_as_postgresql_prints_them() {
        let cases = [
            (1.5f32, "1.5"),
            (1e10, "1e+10"),
            (123456.0, "123456"),
            (1234567.0, "1.234567e+06"),
            (3.4e38, "3.4e+38"),
            (0.1, "0.1"),
        ];
        for (value, text) in cases {
            assert_eq!(float4_text(value), text, "{value:e}");
        }
    }
}
