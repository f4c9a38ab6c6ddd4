//! Parameters that a kept physical plan reads when it runs, not when it is planned.
//!
//! DataFusion's physical planner refuses placeholders (`$1`): every value must be a literal
//! before physical planning, so a prepared query planned its physical side again at every
//! execution, and that planning cost more than reading a 1,000-row key range. Here each
//! placeholder of a kept plan becomes a call of a [`ParamUdf`], a function of no arguments
//! that returns the current value of its parameter from the plan's [`ParamCell`]. The physical
//! plan is then made once; an execution puts its values in the cell and runs it.
//!
//! The function is volatile, so no optimizer folds it into a constant, and its name in a
//! schema is the placeholder's own (`$1`), so the plan's column names do not change.

use std::any::Any;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock, Mutex};

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::expr::{Placeholder, ScalarFunction};
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{
    ColumnarValue, Expr, LogicalPlan, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;

/// Most parameters a kept physical plan takes (PostgreSQL's own limit is 65,535; a statement
/// with more is planned the usual way at each execution).
pub const MAX_PARAMS: usize = 1024;

/// The values of one execution's parameters, `$1` first.
#[derive(Debug, Default)]
pub struct ParamCell {
    values: Mutex<Arc<[ScalarValue]>>,
}

impl ParamCell {
    pub fn set(&self, values: Vec<ScalarValue>) {
        *self.lock() = values.into();
    }

    /// The value of parameter `index` (0 for `$1`).
    pub fn get(&self, index: usize) -> Result<ScalarValue> {
        match self.lock().get(index) {
            Some(value) => Ok(value.clone()),
            None => exec_err!("no value was bound for parameter ${}", index + 1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Arc<[ScalarValue]>> {
        self.values.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `$n` of a kept plan: returns the value its cell holds when it is evaluated.
#[derive(Debug)]
pub struct ParamUdf {
    cell: Arc<ParamCell>,
    index: usize,
    field: FieldRef,
    signature: Signature,
}

impl PartialEq for ParamUdf {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.cell, &other.cell) && self.index == other.index
    }
}

impl Eq for ParamUdf {}

impl Hash for ParamUdf {
    fn hash<H: Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.cell).hash(state);
        self.index.hash(state);
    }
}

/// The name of the function that reads a bound parameter's value.
pub(crate) const PARAMETER_FUNCTION: &str = "zyron_param";

impl ScalarUDFImpl for ParamUdf {
    fn name(&self) -> &str {
        PARAMETER_FUNCTION
    }

    fn display_name(&self, _args: &[Expr]) -> Result<String> {
        Ok(format!("${}", self.index + 1))
    }

    fn schema_name(&self, _args: &[Expr]) -> Result<String> {
        Ok(format!("${}", self.index + 1))
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(self.field.data_type().clone())
    }

    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(self.field.clone())
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(self.cell.get(self.index)?))
    }
}

/// The types of a kept plan's parameters, `$1` first (`None` for one the plan never reads).
pub type ParamTypes = Vec<Option<DataType>>;

/// `plan` with each placeholder replaced by a call that reads `cell`, and the parameters'
/// types. `None` when a placeholder is named (`$name`), has no type, or is past
/// [`MAX_PARAMS`]: such a plan is bound and planned at each execution instead.
pub fn read_from_cell(
    plan: &LogicalPlan,
    cell: &Arc<ParamCell>,
) -> Result<Option<(LogicalPlan, ParamTypes)>> {
    let mut types: ParamTypes = Vec::new();
    let mut representable = true;
    let mut replace = |expr: Expr| -> Result<Transformed<Expr>> {
        let Expr::Placeholder(Placeholder { id, field }) = &expr else {
            return Ok(Transformed::no(expr));
        };
        let index = id.strip_prefix('$').and_then(|n| n.parse::<usize>().ok());
        let (Some(index @ 1..=MAX_PARAMS), Some(field)) = (index, field) else {
            representable = false;
            return Ok(Transformed::no(expr));
        };
        let index = index - 1;
        if types.len() <= index {
            types.resize(index + 1, None);
        }
        types[index] = Some(field.data_type().clone());
        let udf = ParamUdf {
            cell: cell.clone(),
            index,
            field: field.clone(),
            signature: Signature::nullary(Volatility::Volatile),
        };
        let call = ScalarFunction::new_udf(Arc::new(ScalarUDF::new_from_impl(udf)), vec![]);
        Ok(Transformed::yes(Expr::ScalarFunction(call)))
    };
    let rewritten = plan
        .clone()
        .transform_up_with_subqueries(|node| {
            node.map_expressions(|expr| expr.transform_up(&mut replace))?
                .map_data(|node| node.recompute_schema())
        })?
        .data;
    Ok(representable.then_some((rewritten, types)))
}

/// `expr` with every parameter call replaced by the value its cell holds now, and the
/// parts that makes constant folded (`k <= $2 + 999` becomes `k <= 1999`, a bound the
/// index can use).
pub fn with_current_values(expr: &Expr) -> Result<Expr> {
    let bound = expr
        .clone()
        .transform_up(|e| match param_of(&e) {
            Some(param) => Ok(Transformed::yes(Expr::Literal(
                param.cell.get(param.index)?,
                None,
            ))),
            None => Ok(Transformed::no(e)),
        })?
        .data;
    fold_constants(bound)
}

/// `expr` with each largest part that reads no column simplified (evaluated, when it can be).
fn fold_constants(expr: Expr) -> Result<Expr> {
    static SIMPLIFY: LazyLock<SimplifyContext> = LazyLock::new(SimplifyContext::default);
    expr.transform_down(|e| {
        if matches!(e, Expr::Literal(..)) || e.any_column_refs() {
            return Ok(Transformed::no(e));
        }
        let folded = ExprSimplifier::new(SIMPLIFY.clone()).simplify(e)?;
        Ok(Transformed::new(folded, true, TreeNodeRecursion::Jump))
    })
    .map(|t| t.data)
}

/// Whether `expr` reads a parameter.
pub fn reads_params(expr: &Expr) -> bool {
    expr.exists(|e| Ok(param_of(e).is_some())).unwrap_or(true)
}

fn param_of(expr: &Expr) -> Option<&ParamUdf> {
    match expr {
        Expr::ScalarFunction(call) => {
            let any: &dyn Any = call.func.inner().as_ref();
            any.downcast_ref::<ParamUdf>()
        }
        _ => None,
    }
}

/// `values` as the types `types` names, for the cell: `None` if one does not convert (the
/// usual path then reports the error DataFusion gives for it).
pub fn conform(values: Vec<ScalarValue>, types: &ParamTypes) -> Option<Vec<ScalarValue>> {
    if values.len() < types.len() {
        return None;
    }
    values
        .into_iter()
        .enumerate()
        .map(|(i, value)| match types.get(i) {
            Some(Some(data_type)) if value.data_type() != *data_type => {
                value.cast_to(data_type).ok()
            }
            _ => Some(value),
        })
        .collect()
}
