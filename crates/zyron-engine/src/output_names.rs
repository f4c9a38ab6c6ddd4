//! PostgreSQL's names for result columns.
//!
//! PostgreSQL names an unaliased select-list item after what it computes
//! (`count(*)` is `count`, `x::int` is `x`, `1` is `?column?`: its
//! `FigureColname`), and lets two columns share a name (`SELECT 1, 1`).
//! DataFusion names a column after its whole expression (`count(*)`,
//! `Int64(1)`) and refuses a projection whose names repeat. Drivers and
//! pandas show these names as headers, and queries over a derived table
//! refer to them, so every select list gets PostgreSQL's names as aliases
//! before DataFusion plans it. A name already taken in the same list gets a
//! hidden suffix, which [`client_name`] removes before the client sees it.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};

use datafusion::sql::sqlparser::ast::{
    DataType, Expr, Ident, Query, Select, SelectItem, SetExpr, Statement, TrimWhereField, VisitMut,
    VisitorMut,
};

/// Separates a repeated column name from the suffix that keeps it unique for DataFusion.
const REPEAT_MARK: char = '\u{1f}';

/// The name PostgreSQL gives an expression that names nothing (`SELECT 1 + 1`).
const UNNAMED: &str = "?column?";

/// Gives every select list in `statement` PostgreSQL's column names.
pub fn name_columns(statement: &mut Statement) {
    let _ = statement.visit(&mut NameColumns);
}

/// A name for the column at `position` that DataFusion keeps apart from other
/// columns called `name`, and that the client sees as `name`.
pub fn repeated_name(name: &str, position: usize) -> String {
    format!("{name}{REPEAT_MARK}{position}")
}

/// The name a client sees for a column DataFusion calls `name`.
pub fn client_name(name: &str) -> &str {
    name.split_once(REPEAT_MARK).map_or(name, |(name, _)| name)
}

/// `schema` with the names a client sees, or `None` if they are its own names.
pub fn client_schema(schema: &Schema) -> Option<SchemaRef> {
    if !schema
        .fields()
        .iter()
        .any(|f| f.name().contains(REPEAT_MARK))
    {
        return None;
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|field| field.as_ref().clone().with_name(client_name(field.name())))
        .collect();
    Some(Arc::new(Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )))
}

struct NameColumns;

impl VisitorMut for NameColumns {
    type Break = ();

    fn post_visit_select(&mut self, select: &mut Select) -> ControlFlow<()> {
        name_select_list(&mut select.projection);
        ControlFlow::Continue(())
    }
}

fn name_select_list(items: &mut [SelectItem]) {
    // A wildcard's columns are named by the relation they come from, and the
    // names `*` brings in are not known here: an implicit name beside one is
    // kept apart from them (`SELECT *, a::date`).
    let has_wildcard = items.iter().any(|item| {
        matches!(
            item,
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
        )
    });
    let mut taken = HashSet::new();
    for (position, item) in items.iter_mut().enumerate() {
        let (expr, figured, aliased) = match item {
            SelectItem::UnnamedExpr(expr) => {
                let figured = figure_name(expr);
                (expr, figured, false)
            }
            SelectItem::ExprWithAlias { expr, alias } => {
                let figured = Figured::strong(folded(alias));
                (expr, figured, true)
            }
            _ => continue,
        };
        let name = figured.name;
        // A cast or field of a column is named after it in hiding, so that as an
        // alias it does not capture the column in ORDER BY expressions (`ORDER BY a + 1`).
        let plain_column = matches!(expr, Expr::Identifier(_) | Expr::CompoundIdentifier(_));
        let hidden = !aliased && (has_wildcard || (figured.from_column && !plain_column));
        let unique = if taken.insert(name.clone()) && !hidden {
            name
        } else {
            repeated_name(&name, position)
        };
        // A column reference keeps DataFusion's own (qualified) name where it is unique.
        if aliased || !plain_column || client_name(&unique) != unique {
            *item = SelectItem::ExprWithAlias {
                expr: expr.clone(),
                alias: Ident::with_quote('"', unique),
            };
        }
    }
}

/// A figured name and how strongly it names the expression, as in PostgreSQL's
/// `FigureColnameInternal`: a column or function name (2) beats a type name (1),
/// which beats nothing (0).
struct Figured {
    name: String,
    strength: u8,
    /// Named after a column the expression reads.
    from_column: bool,
}

impl Figured {
    fn strong(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            strength: 2,
            from_column: false,
        }
    }

    fn column(name: impl Into<String>) -> Self {
        Self {
            from_column: true,
            ..Self::strong(name)
        }
    }

    fn of_type(data_type: &DataType) -> Self {
        Self {
            name: pg_type_name(data_type),
            strength: 1,
            from_column: false,
        }
    }

    fn unnamed() -> Self {
        Self {
            name: UNNAMED.to_owned(),
            strength: 0,
            from_column: false,
        }
    }
}

fn figure_name(expr: &Expr) -> Figured {
    match expr {
        Expr::Identifier(ident) => Figured::column(folded(ident)),
        Expr::CompoundIdentifier(parts) => parts
            .last()
            .map_or_else(Figured::unnamed, |ident| Figured::column(folded(ident))),
        Expr::CompoundFieldAccess { root, .. } => figure_name(root),
        Expr::Nested(inner) | Expr::Collate { expr: inner, .. } => figure_name(inner),
        Expr::Cast {
            expr, data_type, ..
        } => {
            let inner = figure_name(expr);
            if inner.strength > 1 {
                inner
            } else {
                Figured::of_type(data_type)
            }
        }
        Expr::TypedString(typed) => Figured::of_type(&typed.data_type),
        Expr::Interval(_) => Figured {
            name: "interval".to_owned(),
            strength: 1,
            from_column: false,
        },
        Expr::Function(function) => function
            .name
            .0
            .last()
            .and_then(|part| part.as_ident())
            .map_or_else(Figured::unnamed, |ident| Figured::strong(folded(ident))),
        Expr::Case { .. } => Figured::strong("case"),
        Expr::Exists { .. } => Figured::strong("exists"),
        Expr::Subquery(query) => Figured {
            from_column: false,
            ..subquery_name(query)
        },
        Expr::Array(_) => Figured::strong("array"),
        Expr::Tuple(_) => Figured::strong("row"),
        Expr::Extract { .. } => Figured::strong("extract"),
        Expr::Position { .. } => Figured::strong("position"),
        Expr::Substring { .. } => Figured::strong("substring"),
        Expr::Overlay { .. } => Figured::strong("overlay"),
        Expr::AtTimeZone { .. } => Figured::strong("timezone"),
        Expr::Ceil { .. } => Figured::strong("ceil"),
        Expr::Floor { .. } => Figured::strong("floor"),
        Expr::Trim { trim_where, .. } => Figured::strong(match trim_where {
            Some(TrimWhereField::Leading) => "ltrim",
            Some(TrimWhereField::Trailing) => "rtrim",
            Some(TrimWhereField::Both) | None => "btrim",
        }),
        _ => Figured::unnamed(),
    }
}

/// An identifier as PostgreSQL reads it: folded to lower case unless quoted.
fn folded(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// A scalar subquery is named after its first column.
fn subquery_name(query: &Query) -> Figured {
    let mut body = query.body.as_ref();
    loop {
        match body {
            SetExpr::Select(select) => {
                return match select.projection.first() {
                    Some(SelectItem::UnnamedExpr(expr)) => figure_name(expr),
                    Some(SelectItem::ExprWithAlias { alias, .. }) => {
                        Figured::strong(client_name(&folded(alias)))
                    }
                    _ => Figured::unnamed(),
                };
            }
            SetExpr::Query(inner) => body = inner.body.as_ref(),
            SetExpr::SetOperation { left, .. } => body = left.as_ref(),
            _ => return Figured::unnamed(),
        }
    }
}

/// PostgreSQL's name for a type as written in SQL (`integer` is `int4`).
fn pg_type_name(data_type: &DataType) -> String {
    let name = match data_type {
        DataType::SmallInt(_) | DataType::Int2(_) => "int2",
        DataType::Int(_) | DataType::Integer(_) | DataType::Int4(_) => "int4",
        DataType::BigInt(_) | DataType::Int8(_) => "int8",
        DataType::Real | DataType::Float4 => "float4",
        DataType::Double(_) | DataType::DoublePrecision | DataType::Float8 => "float8",
        DataType::Numeric(_) | DataType::Decimal(_) | DataType::Dec(_) => "numeric",
        DataType::Boolean | DataType::Bool => "bool",
        DataType::Char(_) | DataType::Character(_) => "bpchar",
        DataType::Varchar(_) | DataType::CharacterVarying(_) | DataType::CharVarying(_) => {
            "varchar"
        }
        DataType::Timestamp(_, tz) => match tz {
            datafusion::sql::sqlparser::ast::TimezoneInfo::WithTimeZone
            | datafusion::sql::sqlparser::ast::TimezoneInfo::Tz => "timestamptz",
            _ => "timestamp",
        },
        DataType::Time(_, tz) => match tz {
            datafusion::sql::sqlparser::ast::TimezoneInfo::WithTimeZone
            | datafusion::sql::sqlparser::ast::TimezoneInfo::Tz => "timetz",
            _ => "time",
        },
        DataType::Bytea => "bytea",
        other => {
            let written = other.to_string().to_lowercase();
            let bare = written.split('(').next().unwrap_or(&written).trim();
            return bare.rsplit('.').next().unwrap_or(bare).to_owned();
        }
    };
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn named(sql: &str) -> String {
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0);
        name_columns(&mut statement);
        statement.to_string().replace(REPEAT_MARK, "#")
    }

    #[test]
    fn unquoted_names_fold_to_lower_case() {
        assert_eq!(
            named("SELECT COUNT(*), a AS X, b AS \"Y\" FROM t"),
            "SELECT COUNT(*) AS \"count\", a AS \"x\", b AS \"Y\" FROM t"
        );
    }

    #[test]
    fn expressions_get_postgresql_names() {
        assert_eq!(
            named(
                "SELECT count(*), 1, max(a) + 1, a::int, 1::int, true, CASE WHEN a THEN 1 END FROM t"
            ),
            "SELECT count(*) AS \"count\", 1 AS \"?column?\", max(a) + 1 AS \"?column?#2\", \
             a::INT AS \"a#3\", 1::INT AS \"int4\", true AS \"?column?#5\", \
             CASE WHEN a THEN 1 END AS \"case\" FROM t"
        );
    }

    #[test]
    fn names_beside_a_wildcard_are_kept_apart_from_its_columns() {
        assert_eq!(
            named("SELECT *, a::date, count(*) FROM t"),
            "SELECT *, a::DATE AS \"a#1\", count(*) AS \"count#2\" FROM t"
        );
    }

    #[test]
    fn plain_columns_keep_their_qualified_names_unless_repeated() {
        assert_eq!(
            named("SELECT t.a, b, a FROM t"),
            "SELECT t.a, b, a AS \"a#2\" FROM t"
        );
    }

    #[test]
    fn repeated_aliases_are_kept_apart() {
        assert_eq!(
            named("SELECT -c AS x, d AS x FROM t"),
            "SELECT -c AS \"x\", d AS \"x#1\" FROM t"
        );
        assert_eq!(client_name("x\u{1f}1"), "x");
        assert_eq!(client_name("x"), "x");
    }

    #[test]
    fn subqueries_are_named_too() {
        assert_eq!(
            named("SELECT (SELECT count(*) FROM u), EXISTS (SELECT 1) FROM t"),
            "SELECT (SELECT count(*) AS \"count\" FROM u) AS \"count\", \
             EXISTS (SELECT 1 AS \"?column?\") AS \"exists\" FROM t"
        );
    }
}
