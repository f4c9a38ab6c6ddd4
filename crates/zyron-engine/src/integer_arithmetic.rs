//! PostgreSQL's integer arithmetic: small integer literals are `integer`,
//! and `+`, `-` and `*` on integers fail with 22003 where the result does not
//! fit, instead of wrapping around.
//!
//! DataFusion 55 types every integer literal as BIGINT and lowers integer
//! arithmetic to Arrow's wrapping kernels, so `2147483647::int + 1` answered
//! 2147483648 and `9223372036854775807 + 1` a negative number. Two steps give
//! PostgreSQL's answers: before planning, an integer literal that is an operand
//! of arithmetic and fits in 32 bits becomes an `integer`
//! ([`type_integer_literals`]); after type coercion, integer `+`, `-` and `*`
//! become calls of checked functions ([`CheckedIntegerArithmetic`]), which the
//! constant folder and the executor both run. The same rule checks float
//! arithmetic (`float_arithmetic`).

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::Datum;
use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::arrow::error::ArrowError;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ReturnFieldArgs,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility,
    WindowFunctionDefinition,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::sql::sqlparser::ast::{
    self, BinaryOperator, CastKind, UnaryOperator, Value, VisitMut, VisitorMut,
};

use zyron_common::{SqlState, ZyronError};

/// Types the integer literals that are operands of arithmetic in `statement` as
/// PostgreSQL does: `integer` where the value fits in 32 bits.
pub fn type_integer_literals(statement: &mut ast::Statement) {
    let _ = statement.visit(&mut IntegerLiterals::default());
}

fn is_function_call(factor: &ast::TableFactor) -> bool {
    matches!(
        factor,
        ast::TableFactor::Table { args: Some(_), .. } | ast::TableFactor::Function { .. }
    )
}

/// Counts the table-function calls it is inside: their arguments keep BIGINT
/// literals (`generate_series(1, 10 - 1)` takes only BIGINT).
#[derive(Default)]
struct IntegerLiterals {
    in_table_function: usize,
}

impl VisitorMut for IntegerLiterals {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut ast::TableFactor) -> ControlFlow<()> {
        if is_function_call(factor) {
            self.in_table_function += 1;
        }
        ControlFlow::Continue(())
    }

    fn post_visit_table_factor(&mut self, factor: &mut ast::TableFactor) -> ControlFlow<()> {
        if is_function_call(factor) {
            self.in_table_function -= 1;
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &mut ast::Expr) -> ControlFlow<()> {
        if let ast::Expr::BinaryOp { left, op, right } = expr
            && is_arithmetic(op)
            && self.in_table_function == 0
            && !is_placeholder(left)
            && !is_placeholder(right)
        {
            as_integer_if_small(left);
            as_integer_if_small(right);
        }
        ControlFlow::Continue(())
    }
}

fn is_arithmetic(op: &BinaryOperator) -> bool {
    matches!(
        op,
        BinaryOperator::Plus
            | BinaryOperator::Minus
            | BinaryOperator::Multiply
            | BinaryOperator::Divide
            | BinaryOperator::Modulo
    )
}

/// Whether `operand` is a parameter (`$1`). DataFusion types a parameter after
/// the other operand of its arithmetic, where PostgreSQL takes the type from
/// its first use: `k BETWEEN $1 AND $1 + 9` must keep `$1` a BIGINT like `k`.
fn is_placeholder(operand: &ast::Expr) -> bool {
    matches!(operand, ast::Expr::Value(value) if matches!(value.value, Value::Placeholder(_)))
}

/// `5` and `-5` become `CAST(5 AS INTEGER)` and `CAST(-5 AS INTEGER)`.
fn as_integer_if_small(operand: &mut ast::Expr) {
    if !fits_in_integer(operand) {
        return;
    }
    *operand = ast::Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(operand.clone()),
        data_type: ast::DataType::Integer(None),
        array: false,
        format: None,
    };
}

/// Whether `operand` is an integer literal, or a negated one, in `integer`'s range.
fn fits_in_integer(operand: &ast::Expr) -> bool {
    let (sign, value) = match operand {
        ast::Expr::Value(value) => ("", value),
        ast::Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            ast::Expr::Value(value) => ("-", value),
            _ => return false,
        },
        _ => return false,
    };
    match &value.value {
        Value::Number(digits, _) => format!("{sign}{digits}").parse::<i32>().is_ok(),
        _ => false,
    }
}

/// Rewrites integer `+`, `-` and `*` into the checked functions of
/// [`checked_function`]. Runs after DataFusion's type coercion, when both
/// operands have the same type.
#[derive(Debug, Default)]
pub struct CheckedIntegerArithmetic;

impl AnalyzerRule for CheckedIntegerArithmetic {
    fn name(&self) -> &str {
        "checked_integer_arithmetic"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        Ok(plan.transform_up_with_subqueries(check_node)?.data)
    }
}

fn check_node(plan: LogicalPlan) -> DfResult<Transformed<LogicalPlan>> {
    let mut schema = merge_schema(&plan.inputs());
    if let LogicalPlan::TableScan(scan) = &plan {
        schema.merge(&DFSchema::try_from_qualified_schema(
            scan.table_name.clone(),
            &scan.source.schema(),
        )?);
    }
    // The functions keep the operator's name and nullability (see `CheckedArithmetic`),
    // so no schema changes.
    plan.map_expressions(|expr| {
        expr.transform_up(|e| {
            check_expr(e, &schema)?
                .transform_data(|e| crate::float_to_integer::round_before_cast(e, &schema))?
                .transform_data(|e| checked_sum(e, &schema))
        })
    })
}

/// `expr` (already type-coerced) with the checks this rule gives a plan's
/// expressions, for statements that never reach the analyzer (`heap::point`).
pub(crate) fn check_arithmetic(expr: Expr, schema: &DFSchema) -> DfResult<Expr> {
    Ok(expr
        .transform_up(|e| {
            check_expr(e, schema)?
                .transform_data(|e| crate::float_to_integer::round_before_cast(e, schema))
        })?
        .data)
}

fn check_expr(expr: Expr, schema: &DFSchema) -> DfResult<Transformed<Expr>> {
    if let Expr::Negative(operand) = &expr {
        let integer = operand
            .get_type(schema)
            .is_ok_and(|t| integer_range_name(&t).is_some());
        if !integer {
            return Ok(Transformed::no(expr));
        }
        let call = checked_negation().call(vec![operand.as_ref().clone()]);
        return Ok(Transformed::yes(call));
    }
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &expr else {
        return Ok(Transformed::no(expr));
    };
    // Typing operands costs: only arithmetic needs it (not comparisons or AND).
    let float_checked = crate::float_arithmetic::checked(*op);
    if float_checked.is_none() {
        return Ok(Transformed::no(expr));
    }
    let (Ok(left_type), Ok(right_type)) = (left.get_type(schema), right.get_type(schema)) else {
        return Ok(Transformed::no(expr));
    };
    let operands = || vec![left.as_ref().clone(), right.as_ref().clone()];
    if left_type == right_type
        && crate::float_arithmetic::is_float(&left_type)
        && let Some(checked) = float_checked
    {
        return Ok(Transformed::yes(checked.call(operands())));
    }
    let Some(kind) = ArithmeticKind::of(*op) else {
        return Ok(Transformed::no(expr));
    };
    if left_type != right_type || integer_range_name(&left_type).is_none() {
        return Ok(Transformed::no(expr));
    }
    Ok(Transformed::yes(checked_function(kind).call(operands())))
}

/// `sum` of BIGINT values, in an aggregate or a window, as [`crate::checked_sum`].
fn checked_sum(expr: Expr, schema: &DFSchema) -> DfResult<Transformed<Expr>> {
    let is_bigint_sum = |name: &str, args: &[Expr]| {
        name == "sum" && matches!(args, [arg] if arg.get_type(schema).ok() == Some(DataType::Int64))
    };
    match expr {
        Expr::AggregateFunction(mut call)
            if is_bigint_sum(call.func.name(), &call.params.args)
                && call.func != crate::checked_sum::checked_sum() =>
        {
            call.func = crate::checked_sum::checked_sum();
            Ok(Transformed::yes(Expr::AggregateFunction(call)))
        }
        Expr::WindowFunction(mut window) => {
            let swap = matches!(&window.fun, WindowFunctionDefinition::AggregateUDF(udf)
                if is_bigint_sum(udf.name(), &window.params.args)
                    && *udf != crate::checked_sum::checked_sum());
            if !swap {
                return Ok(Transformed::no(Expr::WindowFunction(window)));
            }
            window.fun = WindowFunctionDefinition::AggregateUDF(crate::checked_sum::checked_sum());
            Ok(Transformed::yes(Expr::WindowFunction(window)))
        }
        other => Ok(Transformed::no(other)),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ArithmeticKind {
    Add,
    Subtract,
    Multiply,
}

impl ArithmeticKind {
    fn of(op: Operator) -> Option<Self> {
        match op {
            Operator::Plus => Some(Self::Add),
            Operator::Minus => Some(Self::Subtract),
            Operator::Multiply => Some(Self::Multiply),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Add => "int_add_checked",
            Self::Subtract => "int_sub_checked",
            Self::Multiply => "int_mul_checked",
        }
    }

    fn symbol(self) -> &'static str {
        match self {
            Self::Add => "+",
            Self::Subtract => "-",
            Self::Multiply => "*",
        }
    }
}

/// PostgreSQL's name for an integer type in its overflow message.
fn integer_range_name(data_type: &DataType) -> Option<&'static str> {
    match data_type {
        DataType::Int16 => Some("smallint"),
        DataType::Int32 => Some("integer"),
        DataType::Int64 => Some("bigint"),
        _ => None,
    }
}

/// The checked function for `kind`, made once per process.
fn checked_function(kind: ArithmeticKind) -> Arc<ScalarUDF> {
    use std::sync::OnceLock;
    static FUNCTIONS: OnceLock<[Arc<ScalarUDF>; 3]> = OnceLock::new();
    let functions = FUNCTIONS.get_or_init(|| {
        [
            ArithmeticKind::Add,
            ArithmeticKind::Subtract,
            ArithmeticKind::Multiply,
        ]
        .map(|kind| Arc::new(ScalarUDF::new_from_impl(CheckedArithmetic::new(kind))))
    });
    functions[kind as usize].clone()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedArithmetic {
    kind: ArithmeticKind,
    signature: Signature,
}

impl CheckedArithmetic {
    fn new(kind: ArithmeticKind) -> Self {
        let same_type_pairs = [DataType::Int16, DataType::Int32, DataType::Int64]
            .into_iter()
            .map(|t| TypeSignature::Exact(vec![t.clone(), t]))
            .collect();
        Self {
            kind,
            signature: Signature::one_of(same_type_pairs, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for CheckedArithmetic {
    fn name(&self) -> &str {
        self.kind.name()
    }

    fn schema_name(&self, args: &[Expr]) -> DfResult<String> {
        Ok(operator_name(args, self.kind.symbol()))
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        Ok(operator_field(self.name(), &args))
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(arg_types[0].clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let [left, right] = &args.args[..] else {
            return Err(DataFusionError::Internal(format!(
                "{} takes two arguments",
                self.name()
            )));
        };
        let data_type = left.data_type();
        let all_scalar = matches!(
            (left, right),
            (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_))
        );
        let result = {
            let left = datum(left)?;
            let right = datum(right)?;
            match self.kind {
                ArithmeticKind::Add => numeric::add(left.as_ref(), right.as_ref()),
                ArithmeticKind::Subtract => numeric::sub(left.as_ref(), right.as_ref()),
                ArithmeticKind::Multiply => numeric::mul(left.as_ref(), right.as_ref()),
            }
        }
        .map_err(|error| out_of_range(error, &data_type))?;
        if all_scalar {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &result, 0,
            )?))
        } else {
            Ok(ColumnarValue::Array(result))
        }
    }
}

/// `-x` for integers, failing with 22003 where Arrow's negation wraps
/// (`-(-2147483648)`); named `(- x)` as the operator it replaces.
fn checked_negation() -> Arc<ScalarUDF> {
    use std::sync::OnceLock;
    static FUNCTION: OnceLock<Arc<ScalarUDF>> = OnceLock::new();
    FUNCTION
        .get_or_init(|| Arc::new(ScalarUDF::new_from_impl(CheckedNegation::new())))
        .clone()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedNegation {
    signature: Signature,
}

impl CheckedNegation {
    fn new() -> Self {
        let integers = [DataType::Int16, DataType::Int32, DataType::Int64]
            .into_iter()
            .map(|t| TypeSignature::Exact(vec![t]))
            .collect();
        Self {
            signature: Signature::one_of(integers, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for CheckedNegation {
    fn name(&self) -> &str {
        "int_neg_checked"
    }

    fn schema_name(&self, args: &[Expr]) -> DfResult<String> {
        Ok(format!("(- {})", args[0].schema_name()))
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        Ok(args.arg_fields[0].clone())
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(arg_types[0].clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let [operand] = &args.args[..] else {
            return Err(DataFusionError::Internal(
                "int_neg_checked takes one argument".to_owned(),
            ));
        };
        let data_type = operand.data_type();
        let array = match operand {
            ColumnarValue::Array(array) => array.clone(),
            ColumnarValue::Scalar(scalar) => scalar.to_array()?,
        };
        let negated = numeric::neg(array.as_ref()).map_err(|e| out_of_range(e, &data_type))?;
        Ok(match operand {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&negated, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(negated),
        })
    }
}

/// A checked operator function's name: the operator's it replaces (`t.a +
/// Int32(1)`), so every schema above the rewritten expression stays as
/// DataFusion planned it.
pub(crate) fn operator_name(args: &[Expr], symbol: &str) -> String {
    format!(
        "{} {symbol} {}",
        args[0].schema_name(),
        args[1].schema_name()
    )
}

/// A checked operator function's result: its operands' type, nullable where
/// the operator's result is (if either operand is).
pub(crate) fn operator_field(name: &str, args: &ReturnFieldArgs) -> FieldRef {
    let nullable = args.arg_fields.iter().any(|f| f.is_nullable());
    let data_type = args.arg_fields[0].data_type().clone();
    Arc::new(Field::new(name, data_type, nullable))
}

fn datum(value: &ColumnarValue) -> DfResult<Box<dyn Datum>> {
    Ok(match value {
        ColumnarValue::Array(array) => Box::new(array.clone()),
        ColumnarValue::Scalar(scalar) => Box::new(scalar.to_scalar()?),
    })
}

fn out_of_range(error: ArrowError, data_type: &DataType) -> DataFusionError {
    match (error, integer_range_name(data_type)) {
        (ArrowError::ArithmeticOverflow(_), Some(name)) => {
            DataFusionError::External(Box::new(ZyronError::new(
                SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
                format!("{name} out of range"),
            )))
        }
        (error, _) => DataFusionError::ArrowError(Box::new(error), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn typed(sql: &str) -> String {
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0);
        type_integer_literals(&mut statement);
        statement.to_string()
    }

    #[test]
    fn arithmetic_operands_that_fit_become_integers() {
        assert_eq!(
            typed("SELECT a + 1, 2 * -3, 3000000000 + 1, 1.5 + 1 FROM t ORDER BY 1 LIMIT 2"),
            "SELECT a + CAST(1 AS INTEGER), CAST(2 AS INTEGER) * CAST(-3 AS INTEGER), \
             3000000000 + CAST(1 AS INTEGER), 1.5 + CAST(1 AS INTEGER) FROM t ORDER BY 1 LIMIT 2"
        );
        assert_eq!(
            typed("SELECT * FROM generate_series(1, 10 - 1)"),
            "SELECT * FROM generate_series(1, 10 - 1)"
        );
    }

    #[test]
    fn a_parameter_beside_a_literal_keeps_both_untyped() {
        assert_eq!(
            typed("SELECT $1 + 9, 9 * $2, $3::int + 1 FROM t"),
            "SELECT $1 + 9, 9 * $2, $3::INT + CAST(1 AS INTEGER) FROM t"
        );
    }
}
