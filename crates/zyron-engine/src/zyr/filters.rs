//! Translating DataFusion filter expressions into `.zyr` column predicates.
//!
//! Only shapes the reader evaluates exactly are translated: `column <op> literal` (either
//! side), `BETWEEN`, `IN (literals)`, `IS [NOT] NULL`, and conjunctions of these. A filter
//! translated whole, on columns other than floats (whose NaN and -0.0 ordering the reader
//! does not promise to share with Arrow's kernels), is *exact*: the scan then always applies
//! it and DataFusion drops its own filter, so a column used only in the filter is never
//! decoded. A filter translated in part is *inexact*: DataFusion keeps its filter above the
//! scan, which may return extra rows but never fewer.

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};
use datafusion::scalar::ScalarValue;
use zyron_format::{CmpOp, ColumnPredicate, PredicateOp, Scalar};

/// The predicates `expr` implies (all of which must hold); empty when none can be pushed.
pub fn to_predicates(expr: &Expr, schema: &Schema) -> Vec<ColumnPredicate> {
    translate(expr, schema).0
}

/// Whether `expr` becomes predicates that are together exactly equivalent to it.
pub fn is_exact(expr: &Expr, schema: &Schema) -> bool {
    let (predicates, whole) = translate(expr, schema);
    whole
        && !predicates.is_empty()
        && predicates.iter().all(|p| match &p.op {
            PredicateOp::Cmp(_, v) => !matches!(v, Scalar::Float(_)),
            PredicateOp::In(values) => !values.iter().any(|v| matches!(v, Scalar::Float(_))),
            PredicateOp::IsNull | PredicateOp::IsNotNull => true,
        })
}

fn translate(expr: &Expr, schema: &Schema) -> (Vec<ColumnPredicate>, bool) {
    let mut out = vec![];
    let whole = collect(expr, schema, &mut out);
    (out, whole)
}

/// Appends the predicates `expr` implies; returns whether they cover all of it.
fn collect(expr: &Expr, schema: &Schema, out: &mut Vec<ColumnPredicate>) -> bool {
    let before = out.len();
    match expr {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And,
            right,
        }) => {
            // Both sides are visited, so a conjunction pushes what it can even when one side
            // cannot be translated.
            let l = collect(left, schema, out);
            let r = collect(right, schema, out);
            return l && r;
        }
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Or,
            right,
        }) => {
            // The optimizer turns a short IN list into ORed equalities; they become IN again.
            if let (Some((lc, mut values)), Some((rc, more))) =
                (equalities(left, schema), equalities(right, schema))
                && lc == rc
            {
                values.extend(more);
                out.push(ColumnPredicate {
                    column: lc,
                    op: PredicateOp::In(values),
                });
            }
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (column, literal, op) = match (left.as_ref(), right.as_ref()) {
                (Expr::Column(c), Expr::Literal(v, _)) => (c, v, cmp_op(*op)),
                (Expr::Literal(v, _), Expr::Column(c)) => (c, v, cmp_op(*op).map(flip)),
                _ => return false,
            };
            let (Some(op), Some((index, dt))) = (op, column_of(schema, &column.name)) else {
                return false;
            };
            if let Some(v) = scalar(literal, dt) {
                out.push(ColumnPredicate {
                    column: index,
                    op: PredicateOp::Cmp(op, v),
                });
            }
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => {
            if let (Expr::Column(c), Expr::Literal(lo, _), Expr::Literal(hi, _)) =
                (expr.as_ref(), low.as_ref(), high.as_ref())
                && let Some((index, dt)) = column_of(schema, &c.name)
                && let (Some(lo), Some(hi)) = (scalar(lo, dt), scalar(hi, dt))
            {
                out.push(ColumnPredicate {
                    column: index,
                    op: PredicateOp::Cmp(CmpOp::GtEq, lo),
                });
                out.push(ColumnPredicate {
                    column: index,
                    op: PredicateOp::Cmp(CmpOp::LtEq, hi),
                });
            }
        }
        Expr::InList(list) if !list.negated => {
            let Expr::Column(c) = list.expr.as_ref() else {
                return false;
            };
            let Some((index, dt)) = column_of(schema, &c.name) else {
                return false;
            };
            let values: Option<Vec<Scalar>> = list
                .list
                .iter()
                .map(|e| match e {
                    Expr::Literal(v, _) => scalar(v, dt),
                    _ => None,
                })
                .collect();
            if let Some(values) = values {
                out.push(ColumnPredicate {
                    column: index,
                    op: PredicateOp::In(values),
                });
            }
        }
        Expr::IsNull(e) | Expr::IsNotNull(e) => {
            let Expr::Column(c) = e.as_ref() else {
                return false;
            };
            let Some((index, _)) = column_of(schema, &c.name) else {
                return false;
            };
            let op = if matches!(expr, Expr::IsNull(_)) {
                PredicateOp::IsNull
            } else {
                PredicateOp::IsNotNull
            };
            out.push(ColumnPredicate { column: index, op });
        }
        _ => {}
    }
    // Each remaining arm pushes its predicates only when it translated the whole expression.
    out.len() > before
}

/// `expr` as one column equal to one of some values (`=`, `IN`, or ORs of them), if it is that.
fn equalities(expr: &Expr, schema: &Schema) -> Option<(usize, Vec<Scalar>)> {
    let (predicates, whole) = translate(expr, schema);
    match predicates.as_slice() {
        [p] if whole => match &p.op {
            PredicateOp::Cmp(CmpOp::Eq, v) => Some((p.column, vec![v.clone()])),
            PredicateOp::In(values) => Some((p.column, values.clone())),
            _ => None,
        },
        _ => None,
    }
}

fn column_of<'a>(schema: &'a Schema, name: &str) -> Option<(usize, &'a DataType)> {
    let index = schema.index_of(name).ok()?;
    let dt = schema.field(index).data_type();
    // Predicates apply to top-level primitive columns only.
    (!matches!(dt, DataType::List(_) | DataType::Struct(_))).then_some((index, dt))
}

fn cmp_op(op: Operator) -> Option<CmpOp> {
    Some(match op {
        Operator::Eq => CmpOp::Eq,
        Operator::NotEq => CmpOp::NotEq,
        Operator::Lt => CmpOp::Lt,
        Operator::LtEq => CmpOp::LtEq,
        Operator::Gt => CmpOp::Gt,
        Operator::GtEq => CmpOp::GtEq,
        _ => return None,
    })
}

/// `literal op column` is `column flip(op) literal`.
fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::LtEq => CmpOp::GtEq,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::GtEq => CmpOp::LtEq,
        other => other,
    }
}

/// The literal as a predicate value for a column of type `dt`; `None` when the types do not
/// line up exactly (the optimizer normally casts literals to the column's type).
fn scalar(v: &ScalarValue, dt: &DataType) -> Option<Scalar> {
    use ScalarValue as S;
    let int = |x: Option<i128>| x.map(Scalar::Int);
    match (v, dt) {
        (S::Boolean(b), DataType::Boolean) => int(b.map(i128::from)),
        (S::Int8(x), DataType::Int8) => int(x.map(i128::from)),
        (S::Int16(x), DataType::Int16) => int(x.map(i128::from)),
        (S::Int32(x), DataType::Int32) => int(x.map(i128::from)),
        (S::Int64(x), DataType::Int64) => int(x.map(i128::from)),
        (S::UInt8(x), DataType::UInt8) => int(x.map(i128::from)),
        (S::UInt16(x), DataType::UInt16) => int(x.map(i128::from)),
        (S::UInt32(x), DataType::UInt32) => int(x.map(i128::from)),
        (S::UInt64(x), DataType::UInt64) => int(x.map(i128::from)),
        (S::Date32(x), DataType::Date32) => int(x.map(i128::from)),
        (S::Time64Microsecond(x), DataType::Time64(_))
        | (S::Time64Nanosecond(x), DataType::Time64(_))
            if v.data_type() == *dt =>
        {
            int(x.map(i128::from))
        }
        (S::TimestampSecond(x, _), _)
        | (S::TimestampMillisecond(x, _), _)
        | (S::TimestampMicrosecond(x, _), _)
        | (S::TimestampNanosecond(x, _), _)
            if same_timestamp_unit(&v.data_type(), dt) =>
        {
            int(x.map(i128::from))
        }
        (S::Decimal128(x, p, s), DataType::Decimal128(cp, cs)) if p == cp && s == cs => int(*x),
        (S::Float32(x), DataType::Float32) => x.map(|f| Scalar::Float(f64::from(f))),
        (S::Float64(x), DataType::Float64) => x.map(Scalar::Float),
        (S::Utf8(s) | S::Utf8View(s) | S::LargeUtf8(s), DataType::Utf8 | DataType::Utf8View) => {
            s.as_ref().map(|s| Scalar::Bytes(s.as_bytes().to_vec()))
        }
        (S::Binary(b) | S::BinaryView(b), DataType::Binary) => {
            b.as_ref().map(|b| Scalar::Bytes(b.clone()))
        }
        _ => None,
    }
}

fn same_timestamp_unit(a: &DataType, b: &DataType) -> bool {
    matches!((a, b), (DataType::Timestamp(u1, _), DataType::Timestamp(u2, _)) if u1 == u2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Field;
    use datafusion::prelude::{col, lit};

    #[test]
    fn conjunctions_ranges_and_lists_become_predicates() {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("s", DataType::Utf8View, true),
        ]);
        let expr = col("a")
            .gt_eq(lit(5i64))
            .and(lit(10i64).gt(col("a")))
            .and(col("s").in_list(vec![lit(ScalarValue::Utf8View(Some("x".into())))], false));
        let p = to_predicates(&expr, &schema);
        assert_eq!(p.len(), 3);
        assert_eq!(p[1].op, PredicateOp::Cmp(CmpOp::Lt, Scalar::Int(10)));
        assert!(to_predicates(&col("a").like(lit("x")), &schema).is_empty());
        // A literal of another type is not pushed (it would compare differently).
        assert!(to_predicates(&col("a").eq(lit(5i32)), &schema).is_empty());
        assert!(is_exact(&expr, &schema));
        // ORed equalities on one column are an IN list; on two columns they are not pushed.
        let ored = col("a").eq(lit(1i64)).or(col("a").eq(lit(2i64)));
        assert_eq!(
            to_predicates(&ored, &schema)[0].op,
            PredicateOp::In(vec![Scalar::Int(1), Scalar::Int(2)])
        );
        let mixed = col("a").eq(lit(1i64)).or(col("s").is_null());
        assert!(to_predicates(&mixed, &schema).is_empty());
        // Part of a conjunction pushed is inexact.
        assert!(!is_exact(
            &col("a").gt(lit(1i64)).and(col("a").like(lit("x"))),
            &schema
        ));
    }
}
