//! The logical `Apply` node: its input's rows, each with one more column per
//! subquery, the subquery's answer for that row's outer values.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::{Column, DFSchema, DFSchemaRef, Result, internal_err};
use datafusion::logical_expr::{Expr, LogicalPlan, Operator, UserDefinedLogicalNodeCore};

/// What a subquery yields for one outer row.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `(SELECT ..)`: its one value, NULL for no row, 21000 for more.
    Scalar,
    /// `[NOT] EXISTS (SELECT ..)`.
    Exists { negated: bool },
    /// `probe op ANY|ALL (SELECT ..)`, which `[NOT] IN` is with `=` and ANY;
    /// `probe` is a column of the input.
    Compare {
        probe: Column,
        op: Operator,
        all: bool,
        negated: bool,
    },
}

/// One subquery of an [`Apply`], with the input columns it reads.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Correlated {
    pub plan: Arc<LogicalPlan>,
    pub kind: Kind,
    /// Input columns the subquery reads as outer references (may be empty).
    pub outer: Vec<Column>,
    /// Name of the column the answer goes to.
    pub output: String,
}

impl Correlated {
    pub fn output_type(&self) -> DataType {
        match self.kind {
            Kind::Scalar => self.plan.schema().field(0).data_type().clone(),
            Kind::Exists { .. } | Kind::Compare { .. } => DataType::Boolean,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Apply {
    pub input: LogicalPlan,
    pub subqueries: Vec<Correlated>,
    schema: DFSchemaRef,
}

impl Apply {
    pub fn try_new(input: LogicalPlan, subqueries: Vec<Correlated>) -> Result<Self> {
        let added: Vec<(Option<datafusion::common::TableReference>, Arc<Field>)> = subqueries
            .iter()
            .map(|s| {
                let nullable = !matches!(s.kind, Kind::Exists { .. });
                (
                    None,
                    Arc::new(Field::new(&s.output, s.output_type(), nullable)),
                )
            })
            .collect();
        let mut schema = input.schema().as_ref().clone();
        schema.merge(&DFSchema::new_with_metadata(added, Default::default())?);
        if schema.fields().len() != input.schema().fields().len() + subqueries.len() {
            return internal_err!("an Apply's output column clashes with one of its input");
        }
        Ok(Self {
            input,
            subqueries,
            schema: Arc::new(schema),
        })
    }
}

impl Hash for Apply {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.input.hash(state);
        self.subqueries.hash(state);
    }
}

impl PartialOrd for Apply {
    fn partial_cmp(&self, _other: &Self) -> Option<Ordering> {
        None
    }
}

impl UserDefinedLogicalNodeCore for Apply {
    fn name(&self) -> &str {
        "Apply"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    /// None: the subqueries are planned and run per outer row by `ApplyExec`,
    /// so no rule may rewrite them as expressions of this node.
    fn expressions(&self) -> Vec<Expr> {
        vec![]
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let described: Vec<String> = self
            .subqueries
            .iter()
            .map(|s| {
                let outer: Vec<String> = s.outer.iter().map(|c| c.flat_name()).collect();
                format!("{} = {:?} over [{}]", s.output, s.kind, outer.join(", "))
            })
            .collect();
        write!(f, "Apply: {}", described.join("; "))
    }

    fn with_exprs_and_inputs(
        &self,
        exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> Result<Self> {
        if !exprs.is_empty() || inputs.len() != 1 {
            return internal_err!("Apply takes one input and no expressions");
        }
        Self::try_new(inputs.remove(0), self.subqueries.clone())
    }

    /// Every input column may be an outer value of a subquery.
    fn necessary_children_exprs(&self, _output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        None
    }
}
