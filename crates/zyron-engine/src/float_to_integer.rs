//! A float or `numeric` cast to an integer type rounds to the nearest integer
//! as PostgreSQL does, where Arrow's cast truncates: a `double precision`
//! rounds ties to even (`rint`: `CAST(x AS INTEGER)` of -1.5 is -2, of 2.5 is
//! 2), and a `numeric` ties away from zero (3), as does a literal such as
//! `2.5`, which is `numeric` in PostgreSQL and a float in DataFusion. The analyzer rule
//! [`CheckedIntegerArithmetic`](crate::integer_arithmetic) rounds before the cast.

use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{Array, Decimal128Array, Float32Array, Float64Array};
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result, ScalarValue, internal_err, plan_err};
use datafusion::logical_expr::expr::Cast;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};

/// `CAST(float AS integer)` with the float rounded as PostgreSQL rounds it.
pub fn round_before_cast(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::Cast(Cast { expr: inner, field }) = &expr else {
        return Ok(Transformed::no(expr));
    };
    let integer_target = matches!(
        field.data_type(),
        DataType::Int16 | DataType::Int32 | DataType::Int64
    );
    let ties = match inner.get_type(schema) {
        Ok(DataType::Decimal128(..)) => Ties::AwayFromZero,
        Ok(DataType::Float32 | DataType::Float64) if is_numeric_literal(inner) => {
            Ties::AwayFromZero
        }
        Ok(DataType::Float32 | DataType::Float64) => Ties::Even,
        _ => return Ok(Transformed::no(expr)),
    };
    if !integer_target {
        return Ok(Transformed::no(expr));
    }
    let rounded = rounding(ties).call(vec![inner.as_ref().clone()]);
    Ok(Transformed::yes(Expr::Cast(Cast::new_from_field(
        Box::new(rounded),
        field.clone(),
    ))))
}

/// `2.5` or `-2.5` as written in SQL.
fn is_numeric_literal(expr: &Expr) -> bool {
    match expr {
        Expr::Literal(ScalarValue::Float64(_) | ScalarValue::Float32(_), _) => true,
        Expr::Negative(inner) => is_numeric_literal(inner),
        _ => false,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Ties {
    Even,
    AwayFromZero,
}

fn rounding(ties: Ties) -> Arc<ScalarUDF> {
    static FUNCTIONS: OnceLock<[Arc<ScalarUDF>; 2]> = OnceLock::new();
    let functions = FUNCTIONS.get_or_init(|| {
        [Ties::Even, Ties::AwayFromZero]
            .map(|ties| Arc::new(ScalarUDF::new_from_impl(Rounding::new(ties))))
    });
    functions[ties as usize].clone()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Rounding {
    ties: Ties,
    signature: Signature,
}

impl Rounding {
    fn new(ties: Ties) -> Self {
        Self {
            ties,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }

    fn round64(&self, v: f64) -> f64 {
        match self.ties {
            Ties::Even => v.round_ties_even(),
            Ties::AwayFromZero => v.round(),
        }
    }

    fn round32(&self, v: f32) -> f32 {
        match self.ties {
            Ties::Even => v.round_ties_even(),
            Ties::AwayFromZero => v.round(),
        }
    }
}

impl ScalarUDFImpl for Rounding {
    fn name(&self) -> &str {
        match self.ties {
            Ties::Even => "round_ties_even",
            Ties::AwayFromZero => "round_ties_away",
        }
    }

    /// Named as its argument, so that the cast keeps the name it had.
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        Ok(args[0].schema_name().to_string())
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match arg_types {
            [DataType::Float32 | DataType::Float64 | DataType::Decimal128(..)] => {
                Ok(arg_types.to_vec())
            }
            _ => plan_err!("{} takes one float or numeric", self.name()),
        }
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types[0].clone())
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(args.arg_fields[0].clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value] = &args.args[..] else {
            return internal_err!("{} takes one argument", self.name());
        };
        match value {
            ColumnarValue::Scalar(ScalarValue::Float64(v)) => Ok(ColumnarValue::Scalar(
                ScalarValue::Float64(v.map(|v| self.round64(v))),
            )),
            ColumnarValue::Scalar(ScalarValue::Float32(v)) => Ok(ColumnarValue::Scalar(
                ScalarValue::Float32(v.map(|v| self.round32(v))),
            )),
            ColumnarValue::Scalar(ScalarValue::Decimal128(v, precision, scale)) => {
                Ok(ColumnarValue::Scalar(ScalarValue::Decimal128(
                    v.map(|v| round_decimal(v, *scale)),
                    *precision,
                    *scale,
                )))
            }
            ColumnarValue::Array(array) => {
                if let Some(a) = array.as_any().downcast_ref::<Float64Array>() {
                    let rounded: Float64Array = a.unary(|v| self.round64(v));
                    return Ok(ColumnarValue::Array(Arc::new(rounded)));
                }
                if let Some(a) = array.as_any().downcast_ref::<Float32Array>() {
                    let rounded: Float32Array = a.unary(|v| self.round32(v));
                    return Ok(ColumnarValue::Array(Arc::new(rounded)));
                }
                if let Some(a) = array.as_any().downcast_ref::<Decimal128Array>() {
                    let scale = a.scale();
                    let rounded: Decimal128Array = a.unary(|v| round_decimal(v, scale));
                    let rounded = rounded.with_precision_and_scale(a.precision(), scale)?;
                    return Ok(ColumnarValue::Array(Arc::new(rounded)));
                }
                internal_err!("{} of {}", self.name(), array.data_type())
            }
            other => internal_err!("{} of {}", self.name(), other.data_type()),
        }
    }
}

/// `value` (a decimal of `scale` places) rounded to an integer, ties away from
/// zero, at the same scale.
fn round_decimal(value: i128, scale: i8) -> i128 {
    if scale <= 0 {
        return value;
    }
    let unit = 10i128.pow(scale as u32);
    let (whole, fraction) = (value / unit, value % unit);
    let whole = if fraction.unsigned_abs() * 2 >= unit.unsigned_abs() {
        whole + value.signum()
    } else {
        whole
    };
    whole * unit
}

#[cfg(test)]
mod tests {
    use super::round_decimal;

    #[test]
    fn decimals_round_ties_away_from_zero() {
        assert_eq!(round_decimal(25, 1), 30);
        assert_eq!(round_decimal(-25, 1), -30);
        assert_eq!(round_decimal(249, 2), 200);
        assert_eq!(round_decimal(-251, 2), -300);
        assert_eq!(round_decimal(7, 0), 7);
    }
}
