//! PostgreSQL's float arithmetic: `double precision` and `real` `+`, `-`, `*`
//! and `/` fail where IEEE arithmetic would quietly leave the finite numbers.
//!
//! A result that overflows to infinity from finite operands is 22003 (`value
//! out of range: overflow`), one that underflows to zero from non-zero
//! operands of `*` or `/` is 22003 (`underflow`), and division by zero is
//! 22012; Arrow's kernels answer `inf`, `0` and `inf`. Infinite operands keep
//! IEEE results (`'infinity'::float8 * 2` is infinity), as in PostgreSQL's
//! `float8_mul` and its siblings. The analyzer rule in `integer_arithmetic`
//! puts these functions in place of the operators after type coercion.

use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::{DataType, FieldRef, Float32Type, Float64Type};
use datafusion::common::{Result, ScalarValue, internal_err};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{
    ColumnarValue, Expr, Operator, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, TypeSignature, Volatility,
};
use zyron_common::{SqlState, ZyronError};

/// The checked function for `op` on two floats of one type, if `op` is arithmetic.
pub fn checked(op: Operator) -> Option<Arc<ScalarUDF>> {
    static FUNCTIONS: OnceLock<[Arc<ScalarUDF>; 4]> = OnceLock::new();
    let kind = FloatOp::of(op)?;
    let functions = FUNCTIONS.get_or_init(|| {
        [
            FloatOp::Add,
            FloatOp::Subtract,
            FloatOp::Multiply,
            FloatOp::Divide,
        ]
        .map(|kind| Arc::new(ScalarUDF::new_from_impl(CheckedFloat::new(kind))))
    });
    Some(functions[kind as usize].clone())
}

pub fn is_float(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Float32 | DataType::Float64)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum FloatOp {
    Add,
    Subtract,
    Multiply,
    Divide,
}

impl FloatOp {
    fn of(op: Operator) -> Option<Self> {
        match op {
            Operator::Plus => Some(Self::Add),
            Operator::Minus => Some(Self::Subtract),
            Operator::Multiply => Some(Self::Multiply),
            Operator::Divide => Some(Self::Divide),
            _ => None,
        }
    }

    fn symbol(self) -> &'static str {
        match self {
            Self::Add => "+",
            Self::Subtract => "-",
            Self::Multiply => "*",
            Self::Divide => "/",
        }
    }

    /// What PostgreSQL reports for `left op right = result`, if anything.
    fn fault(self, left: f64, right: f64, result: f64) -> Option<Fault> {
        if self == Self::Divide && right == 0.0 && !left.is_nan() {
            return Some(Fault::DivisionByZero);
        }
        let finite_operands = match self {
            Self::Divide => left.is_finite(),
            _ => left.is_finite() && right.is_finite(),
        };
        if result.is_infinite() && finite_operands {
            return Some(Fault::Overflow);
        }
        let underflow = match self {
            Self::Multiply => left != 0.0 && right != 0.0,
            Self::Divide => left != 0.0 && !right.is_infinite(),
            Self::Add | Self::Subtract => false,
        };
        (result == 0.0 && underflow).then_some(Fault::Underflow)
    }
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    Overflow,
    Underflow,
    DivisionByZero,
}

impl Fault {
    fn error(self) -> DataFusionError {
        let (state, message) = match self {
            Fault::Overflow => (
                SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
                "value out of range: overflow",
            ),
            Fault::Underflow => (
                SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
                "value out of range: underflow",
            ),
            Fault::DivisionByZero => (SqlState::DIVISION_BY_ZERO, "division by zero"),
        };
        DataFusionError::External(Box::new(ZyronError::new(state, message)))
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedFloat {
    op: FloatOp,
    signature: Signature,
}

impl CheckedFloat {
    fn new(op: FloatOp) -> Self {
        let same_type_pairs = [DataType::Float32, DataType::Float64]
            .into_iter()
            .map(|t| TypeSignature::Exact(vec![t.clone(), t]))
            .collect();
        Self {
            op,
            signature: Signature::one_of(same_type_pairs, Volatility::Immutable),
        }
    }

    fn compute(&self, left: &ArrayRef, right: &ArrayRef) -> Result<ArrayRef> {
        let result = match self.op {
            FloatOp::Add => numeric::add(left, right),
            FloatOp::Subtract => numeric::sub(left, right),
            FloatOp::Multiply => numeric::mul(left, right),
            FloatOp::Divide => numeric::div(left, right),
        }?;
        if let Some(fault) = self.first_fault(left, right, &result) {
            return Err(fault.error());
        }
        Ok(result)
    }

    /// The first row whose result PostgreSQL refuses. Only a result that is
    /// infinite, NaN or zero can be one, so the others are passed over first.
    fn first_fault(&self, left: &ArrayRef, right: &ArrayRef, result: &ArrayRef) -> Option<Fault> {
        let (l, r, out) = (as_f64(left), as_f64(right), as_f64(result));
        (0..out.len())
            .filter(|&row| !out[row].is_normal() && result.is_valid(row))
            .find_map(|row| self.op.fault(l[row], r[row], out[row]))
    }
}

/// A float array's values as doubles (nulls included, as whatever they hold).
fn as_f64(array: &ArrayRef) -> std::borrow::Cow<'_, [f64]> {
    match array.data_type() {
        DataType::Float32 => {
            let values = array.as_primitive::<Float32Type>().values();
            std::borrow::Cow::Owned(values.iter().map(|v| *v as f64).collect())
        }
        _ => std::borrow::Cow::Borrowed(array.as_primitive::<Float64Type>().values()),
    }
}

impl ScalarUDFImpl for CheckedFloat {
    fn name(&self) -> &str {
        match self.op {
            FloatOp::Add => "float_add_checked",
            FloatOp::Subtract => "float_sub_checked",
            FloatOp::Multiply => "float_mul_checked",
            FloatOp::Divide => "float_div_checked",
        }
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        Ok(crate::integer_arithmetic::operator_name(
            args,
            self.op.symbol(),
        ))
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(crate::integer_arithmetic::operator_field(
            self.name(),
            &args,
        ))
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types[0].clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [left, right] = &args.args[..] else {
            return internal_err!("{} takes two arguments", self.name());
        };
        let all_scalar = matches!(
            (left, right),
            (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_))
        );
        // Two scalars make one row, whatever the batch (which may be empty).
        let rows = if all_scalar { 1 } else { args.number_rows };
        let (left, right) = (left.to_array(rows)?, right.to_array(rows)?);
        let result = self.compute(&left, &right)?;
        if all_scalar {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &result, 0,
            )?))
        } else {
            Ok(ColumnarValue::Array(result))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_postgresqls() {
        let fault = |op: FloatOp, l: f64, r: f64| {
            let result = match op {
                FloatOp::Add => l + r,
                FloatOp::Subtract => l - r,
                FloatOp::Multiply => l * r,
                FloatOp::Divide => l / r,
            };
            op.fault(l, r, result).map(|f| format!("{f:?}"))
        };
        assert_eq!(
            fault(FloatOp::Multiply, 1e308, 10.0).as_deref(),
            Some("Overflow")
        );
        assert_eq!(fault(FloatOp::Multiply, f64::INFINITY, 2.0), None);
        assert_eq!(
            fault(FloatOp::Divide, 1.0, 0.0).as_deref(),
            Some("DivisionByZero")
        );
        assert_eq!(
            fault(FloatOp::Divide, 0.0, 0.0).as_deref(),
            Some("DivisionByZero")
        );
        assert_eq!(fault(FloatOp::Divide, f64::NAN, 0.0), None);
        assert_eq!(
            fault(FloatOp::Multiply, 1e-320, 1e-10).as_deref(),
            Some("Underflow")
        );
        assert_eq!(fault(FloatOp::Multiply, 1e-310, 1e-10), None);
        assert_eq!(fault(FloatOp::Divide, 1.0, f64::INFINITY), None);
        assert_eq!(
            fault(FloatOp::Add, f64::MAX, f64::MAX).as_deref(),
            Some("Overflow")
        );
        assert_eq!(fault(FloatOp::Subtract, f64::INFINITY, f64::INFINITY), None);
        assert_eq!(fault(FloatOp::Add, 1.0, f64::NAN), None);
    }
}
