//! `sum` of BIGINT values fails with 22003 where the total leaves BIGINT's
//! range, instead of wrapping around to a wrong number (DataFusion 55 adds
//! with wrapping arithmetic). PostgreSQL's `sum(bigint)` is `numeric` and
//! does not overflow; failing is the honest answer a BIGINT total can give.
//! The analyzer rule in `integer_arithmetic` swaps DataFusion's `sum` for
//! [`CheckedSum`] where the argument is BIGINT (after coercion, every integer
//! sum), in aggregates and in window functions.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{ArrayRef, AsArray, BooleanArray, Int64Array};
use datafusion::arrow::datatypes::{DataType, FieldRef, Int64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, EmitTo, GroupsAccumulator, Signature,
};
use datafusion_functions_aggregate_common::aggregate::groups_accumulator::prim_op::PrimitiveGroupsAccumulator;
use zyron_common::{SqlState, ZyronError};

use crate::heap::to_df;

/// DataFusion's `sum` with checked BIGINT addition; made once per process.
pub fn checked_sum() -> Arc<AggregateUDF> {
    static FUNCTION: OnceLock<Arc<AggregateUDF>> = OnceLock::new();
    FUNCTION
        .get_or_init(|| {
            Arc::new(AggregateUDF::new_from_impl(CheckedSum {
                inner: sum_udaf(),
            }))
        })
        .clone()
}

fn out_of_range() -> datafusion::error::DataFusionError {
    to_df(ZyronError::new(
        SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
        "bigint out of range",
    ))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedSum {
    inner: Arc<AggregateUDF>,
}

impl CheckedSum {
    fn checks(args: &AccumulatorArgs) -> bool {
        args.return_field.data_type() == &DataType::Int64 && !args.is_distinct
    }
}

impl AggregateUDFImpl for CheckedSum {
    /// `sum`, so that every name in the plan stays as DataFusion made it.
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if Self::checks(&args) {
            return Ok(Box::new(CheckedSumAccumulator::default()));
        }
        self.inner.accumulator(args)
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if Self::checks(&args) {
            return Ok(Box::new(CheckedSumAccumulator::default()));
        }
        self.inner.create_sliding_accumulator(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        if !Self::checks(&args) {
            return self.inner.create_groups_accumulator(args);
        }
        let overflowed = Arc::new(AtomicBool::new(false));
        let flag = overflowed.clone();
        let inner =
            PrimitiveGroupsAccumulator::<Int64Type, _>::new(&DataType::Int64, move |x, y| match x
                .checked_add(y)
            {
                Some(total) => *x = total,
                None => flag.store(true, Ordering::Relaxed),
            });
        Ok(Box::new(CheckedGroups {
            inner: Box::new(inner),
            overflowed,
        }))
    }
}

/// A sum of BIGINT values: NULL while it holds none, exact in between (a
/// window adds a frame's new rows before it takes the old ones out), and
/// checked against BIGINT's range when it is read.
#[derive(Debug, Default)]
struct CheckedSumAccumulator {
    total: i128,
    values: u64,
}

impl CheckedSumAccumulator {
    fn add_all(&mut self, values: &ArrayRef, retract: bool) {
        let values: &Int64Array = values.as_primitive::<Int64Type>();
        for value in values.iter().flatten() {
            if retract {
                self.total -= i128::from(value);
                self.values -= 1;
            } else {
                self.total += i128::from(value);
                self.values += 1;
            }
        }
    }

    fn answer(&self) -> Result<ScalarValue> {
        if self.values == 0 {
            return Ok(ScalarValue::Int64(None));
        }
        let total = i64::try_from(self.total).map_err(|_| out_of_range())?;
        Ok(ScalarValue::Int64(Some(total)))
    }
}

impl Accumulator for CheckedSumAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add_all(&values[0], false);
        Ok(())
    }

    /// The state is DataFusion's: the partial sum, NULL for none.
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.add_all(&states[0], false);
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add_all(&values[0], true);
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.answer()?])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.answer()
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
}

/// DataFusion's grouped sum, with additions that note an overflow instead of
/// wrapping; a noted overflow fails the next result taken. (Unlike
/// [`CheckedSumAccumulator`] it checks every step, so a group whose running
/// total leaves the range and comes back fails too.)
struct CheckedGroups {
    inner: Box<dyn GroupsAccumulator>,
    overflowed: Arc<AtomicBool>,
}

impl std::fmt::Debug for CheckedGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckedGroups").finish_non_exhaustive()
    }
}

impl CheckedGroups {
    fn checked<T>(&self, result: Result<T>) -> Result<T> {
        if self.overflowed.load(Ordering::Relaxed) {
            return Err(out_of_range());
        }
        result
    }
}

impl GroupsAccumulator for CheckedGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let result = self
            .inner
            .update_batch(values, group_indices, opt_filter, total_num_groups);
        self.checked(result)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let result = self.inner.evaluate(emit_to);
        self.checked(result)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let result = self.inner.state(emit_to);
        self.checked(result)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        let result = self
            .inner
            .merge_batch(values, group_indices, total_num_groups);
        self.checked(result)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        self.inner.convert_to_state(values, opt_filter)
    }

    fn size(&self) -> usize {
        self.inner.size()
    }
}
