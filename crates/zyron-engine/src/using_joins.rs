//! PostgreSQL's columns for joins `USING (...)` and `NATURAL` joins.
//!
//! In PostgreSQL a join column named in `USING` is one column: the left
//! side's value in an inner or left join, the right side's in a right join and
//! `COALESCE(left, right)` in a full join; `SELECT *` lists the join columns
//! first, then the left side's other columns, then the right side's. DataFusion
//! 55 resolves an unqualified join column to the left side whatever the join
//! type (a full or right join answered NULL where the row came from the right)
//! and keeps the tables' column order. Before planning, each such select is
//! rewritten in those terms: an unqualified join column becomes its merged
//! expression, and `*` the column list PostgreSQL would give.
//!
//! The rewrite needs every column of each side, so it applies where the sides
//! are tables (their schemas are looked up first), subqueries whose select
//! lists name every column, or nested joins of those; elsewhere DataFusion's
//! own reading stays. References inside subqueries are left alone.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;

use datafusion::common::TableReference;
use datafusion::execution::session_state::SessionState;
use datafusion::sql::planner::object_name_to_table_reference;
use datafusion::sql::sqlparser::ast::{
    self, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments,
    GroupByExpr, Ident, JoinConstraint, JoinOperator, ObjectName, OrderByKind, Query, Select,
    SelectItem, SetExpr, TableFactor, TableWithJoins, VisitMut, VisitorMut,
};

/// Column names of the tables a statement reads, by reference.
type TableColumns = HashMap<TableReference, Vec<String>>;

/// Rewrites every select of `statement` that joins with `USING` or `NATURAL`.
pub async fn merge_join_columns(state: &SessionState, statement: &mut ast::Statement) {
    if !has_using_join(statement) {
        return;
    }
    let wrapped = datafusion::sql::parser::Statement::Statement(Box::new(statement.clone()));
    let Ok((tables, ctes)) = datafusion::sql::resolve::resolve_table_references(&wrapped, true)
    else {
        return;
    };
    let mut columns = TableColumns::new();
    for reference in tables {
        if let Some(names) = table_columns(state, &reference).await {
            columns.insert(reference, names);
        }
    }
    let shadowed: HashSet<TableReference> = ctes.into_iter().collect();
    let _ = statement.visit(&mut MergeJoinColumns {
        tables: &columns,
        ctes: &shadowed,
    });
}

fn has_using_join(statement: &ast::Statement) -> bool {
    let mut found = FindUsingJoin(false);
    let _ = ast::Visit::visit(statement, &mut found);
    found.0
}

struct FindUsingJoin(bool);

impl ast::Visitor for FindUsingJoin {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_ref()
            && select.from.iter().any(merges_columns)
        {
            self.0 = true;
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

/// Whether a join in `from`, at any depth, is USING or NATURAL.
fn merges_columns(from: &TableWithJoins) -> bool {
    let nested = |factor: &TableFactor| match factor {
        TableFactor::NestedJoin {
            table_with_joins, ..
        } => merges_columns(table_with_joins),
        _ => false,
    };
    nested(&from.relation)
        || from
            .joins
            .iter()
            .any(|join| using_names(&join.join_operator).is_some() || nested(&join.relation))
}

async fn table_columns(state: &SessionState, reference: &TableReference) -> Option<Vec<String>> {
    let schema = state.schema_for_ref(reference.clone()).ok()?;
    let table = schema.table(reference.table()).await.ok()??;
    Some(
        table
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect(),
    )
}

/// The constraint of a join that merges columns: `Some(None)` for NATURAL,
/// `Some(Some(names))` for USING.
fn using_names(operator: &JoinOperator) -> Option<Option<&[ObjectName]>> {
    match constraint(operator)? {
        JoinConstraint::Using(names) => Some(Some(names)),
        JoinConstraint::Natural => Some(None),
        _ => None,
    }
}

/// The constraint of an inner or outer join, borrowed as `operator` is.
macro_rules! join_constraint {
    ($operator:expr) => {
        match $operator {
            JoinOperator::Join(c)
            | JoinOperator::Inner(c)
            | JoinOperator::Left(c)
            | JoinOperator::LeftOuter(c)
            | JoinOperator::Right(c)
            | JoinOperator::RightOuter(c)
            | JoinOperator::FullOuter(c) => Some(c),
            _ => None,
        }
    };
}

fn constraint(operator: &JoinOperator) -> Option<&JoinConstraint> {
    join_constraint!(operator)
}

fn constraint_mut(operator: &mut JoinOperator) -> Option<&mut JoinConstraint> {
    join_constraint!(operator)
}

/// How a join merges its USING columns.
#[derive(Clone, Copy)]
enum Merge {
    Left,
    Right,
    Full,
}

fn merge_of(operator: &JoinOperator) -> Merge {
    match operator {
        JoinOperator::Right(_) | JoinOperator::RightOuter(_) => Merge::Right,
        JoinOperator::FullOuter(_) => Merge::Full,
        _ => Merge::Left,
    }
}

/// A column of a FROM item: its name and the expression that reads it.
#[derive(Clone)]
struct Column {
    name: String,
    expr: Expr,
    /// A join column merged from both sides.
    merged: bool,
}

struct MergeJoinColumns<'a> {
    tables: &'a TableColumns,
    ctes: &'a HashSet<TableReference>,
}

impl VisitorMut for MergeJoinColumns<'_> {
    type Break = ();

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        let Query { body, order_by, .. } = query;
        if let SetExpr::Select(select) = body.as_mut() {
            let order_by = order_by.as_mut().and_then(|o| match &mut o.kind {
                OrderByKind::Expressions(exprs) => Some(exprs),
                OrderByKind::All(_) => None,
            });
            self.rewrite(select, order_by);
        }
        ControlFlow::Continue(())
    }
}

impl MergeJoinColumns<'_> {
    fn rewrite(&self, select: &mut Select, order_by: Option<&mut Vec<ast::OrderByExpr>>) {
        let [from] = select.from.as_slice() else {
            return;
        };
        if !merges_columns(from) {
            return;
        }
        // Worked on a copy: a side whose columns are unknown leaves the select as it was.
        let mut rewritten = from.clone();
        let Some(columns) = self.joined_columns(&mut rewritten) else {
            return;
        };
        select.from[0] = rewritten;
        let merged: HashMap<String, Expr> = columns
            .iter()
            .filter(|c| c.merged)
            .map(|c| (c.name.clone(), c.expr.clone()))
            .collect();
        expand_wildcard(&mut select.projection, &columns);
        let aliases: HashSet<String> = select
            .projection
            .iter()
            .filter_map(|item| match item {
                SelectItem::ExprWithAlias { alias, .. } => Some(normalized(alias)),
                _ => None,
            })
            .collect();
        for item in &mut select.projection {
            match item {
                SelectItem::UnnamedExpr(Expr::Identifier(ident)) => {
                    if let Some(expr) = merged.get(&normalized(ident)) {
                        *item = SelectItem::ExprWithAlias {
                            expr: expr.clone(),
                            alias: ident.clone(),
                        };
                    }
                }
                SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => {
                    replace_references(expr, &merged)
                }
                _ => {}
            }
        }
        let clauses = select.selection.iter_mut().chain(select.having.as_mut());
        for expr in clauses.chain(select.qualify.as_mut()) {
            replace_references(expr, &merged);
        }
        if let GroupByExpr::Expressions(exprs, _) = &mut select.group_by {
            exprs
                .iter_mut()
                .for_each(|e| replace_references(e, &merged));
        }
        // ORDER BY a name the select list gives reads that output column.
        let inputs: HashMap<String, Expr> = merged
            .into_iter()
            .filter(|(name, _)| !aliases.contains(name))
            .collect();
        for order in order_by.into_iter().flatten() {
            replace_references(&mut order.expr, &inputs);
        }
    }

    /// The columns a join tree yields, in PostgreSQL's order; `None` where a
    /// side's columns are not known. A join on a column merged by an outer
    /// join below it becomes a join `ON` the merged value, which DataFusion
    /// would otherwise take from the left side.
    fn joined_columns(&self, from: &mut TableWithJoins) -> Option<Vec<Column>> {
        let mut columns = self.factor_columns(&mut from.relation)?;
        for join in &mut from.joins {
            let right = self.factor_columns(&mut join.relation)?;
            let names: Vec<String> = match using_names(&join.join_operator) {
                None => {
                    columns.extend(right);
                    continue;
                }
                Some(Some(names)) => names
                    .iter()
                    .map(|n| n.0.last().and_then(|p| p.as_ident()).map(normalized))
                    .collect::<Option<_>>()?,
                Some(None) => columns
                    .iter()
                    .filter(|c| right.iter().any(|r| r.name == c.name))
                    .map(|c| c.name.clone())
                    .collect(),
            };
            let (merged, keys) = merge(columns, right, &names, merge_of(&join.join_operator))?;
            if keys.iter().any(|(l, r)| !is_column(l) || !is_column(r)) {
                join_on(&mut join.join_operator, keys);
            }
            columns = merged;
        }
        Some(columns)
    }

    fn factor_columns(&self, factor: &mut TableFactor) -> Option<Vec<Column>> {
        match factor {
            TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } => {
                let reference = object_name_to_table_reference(name.clone(), true).ok()?;
                if self.ctes.contains(&reference) {
                    return None;
                }
                let names = self.tables.get(&reference)?.clone();
                let qualifier = match alias {
                    Some(alias) => vec![alias.name.clone()],
                    None => name
                        .0
                        .iter()
                        .map(|p| p.as_ident().cloned())
                        .collect::<Option<_>>()?,
                };
                qualified(&qualifier, renamed(names, alias.as_ref())?)
            }
            TableFactor::Derived {
                lateral: false,
                subquery,
                alias: Some(alias),
                ..
            } => {
                let names = renamed(output_names(subquery)?, Some(alias))?;
                qualified(std::slice::from_ref(&alias.name), names)
            }
            TableFactor::NestedJoin {
                table_with_joins,
                alias,
            } => {
                let columns = self.joined_columns(table_with_joins)?;
                match alias {
                    None => Some(columns),
                    Some(alias) => {
                        let names = columns.into_iter().map(|c| c.name).collect();
                        qualified(
                            std::slice::from_ref(&alias.name),
                            renamed(names, Some(alias))?,
                        )
                    }
                }
            }
            _ => None,
        }
    }
}

/// The join's constraint replaced by `ON` the equality of each pair of `keys`.
fn join_on(operator: &mut JoinOperator, keys: Vec<(Expr, Expr)>) {
    let condition = keys
        .into_iter()
        .map(|(l, r)| Expr::BinaryOp {
            left: Box::new(l),
            op: ast::BinaryOperator::Eq,
            right: Box::new(r),
        })
        .reduce(|a, b| Expr::BinaryOp {
            left: Box::new(a),
            op: ast::BinaryOperator::And,
            right: Box::new(b),
        });
    let constraint = match condition {
        Some(condition) => JoinConstraint::On(condition),
        None => JoinConstraint::None,
    };
    if let Some(c) = constraint_mut(operator) {
        *c = constraint;
    }
}

fn is_column(expr: &Expr) -> bool {
    matches!(expr, Expr::CompoundIdentifier(_))
}

/// `left` joined with `right` on `names`: the merged columns first, then the
/// rest of each side, and the pairs of values the join compares. `None` if a
/// name is missing from a side or repeated in it.
fn merge(
    left: Vec<Column>,
    right: Vec<Column>,
    names: &[String],
    how: Merge,
) -> Option<(Vec<Column>, Vec<(Expr, Expr)>)> {
    let find = |side: &[Column], name: &str| {
        let mut found = side.iter().filter(|c| c.name == name);
        let first = found.next()?.clone();
        found.next().is_none().then_some(first)
    };
    let mut columns = Vec::with_capacity(left.len() + right.len());
    let mut keys = Vec::with_capacity(names.len());
    for name in names {
        let (l, r) = (find(&left, name)?, find(&right, name)?);
        keys.push((l.expr.clone(), r.expr.clone()));
        let expr = match how {
            Merge::Left => l.expr,
            Merge::Right => r.expr,
            Merge::Full => coalesce(l.expr, r.expr),
        };
        columns.push(Column {
            name: name.clone(),
            expr,
            merged: true,
        });
    }
    let rest = |side: Vec<Column>| side.into_iter().filter(|c| !names.contains(&c.name));
    columns.extend(rest(left));
    columns.extend(rest(right));
    Some((columns, keys))
}

fn coalesce(left: Expr, right: Expr) -> Expr {
    let arg = |e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e));
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new("coalesce")]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![arg(left), arg(right)],
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// `names` as columns of the relation called `qualifier`.
fn qualified(qualifier: &[Ident], names: Vec<String>) -> Option<Vec<Column>> {
    Some(
        names
            .into_iter()
            .map(|name| {
                let mut parts = qualifier.to_vec();
                parts.push(Ident::with_quote('"', &name));
                Column {
                    name,
                    expr: Expr::CompoundIdentifier(parts),
                    merged: false,
                }
            })
            .collect(),
    )
}

/// `names` after the alias's column list (`AS t(a, b)`), which renames the first ones.
fn renamed(mut names: Vec<String>, alias: Option<&ast::TableAlias>) -> Option<Vec<String>> {
    let renames = alias.map_or(&[][..], |a| a.columns.as_slice());
    if renames.len() > names.len() {
        return None;
    }
    for (name, rename) in names.iter_mut().zip(renames) {
        *name = normalized(&rename.name);
    }
    Some(names)
}

/// The column names of a subquery whose select list names every column.
fn output_names(query: &Query) -> Option<Vec<String>> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    select
        .projection
        .iter()
        .map(|item| match item {
            SelectItem::ExprWithAlias { alias, .. } => {
                Some(crate::output_names::client_name(&normalized(alias)).to_owned())
            }
            SelectItem::UnnamedExpr(Expr::Identifier(ident)) => Some(normalized(ident)),
            SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) => {
                parts.last().map(normalized)
            }
            _ => None,
        })
        .collect()
}

/// Replaces an unqualified `*` by the join's columns in PostgreSQL's order.
fn expand_wildcard(projection: &mut Vec<SelectItem>, columns: &[Column]) {
    let plain = |item: &SelectItem| match item {
        SelectItem::Wildcard(options) => {
            options.opt_exclude.is_none()
                && options.opt_except.is_none()
                && options.opt_replace.is_none()
                && options.opt_rename.is_none()
                && options.opt_ilike.is_none()
        }
        _ => false,
    };
    if !projection.iter().any(plain) {
        return;
    }
    // A merged column is named by its alias, the others by their relation
    // (`j1.t` and `j2.t` may both be there); a merged name that another column
    // also has is hidden as a repeat, since DataFusion refuses `t` beside `x.t`.
    let listed: Vec<SelectItem> = columns
        .iter()
        .enumerate()
        .map(|(position, c)| {
            if !c.merged {
                return SelectItem::UnnamedExpr(c.expr.clone());
            }
            let repeated = columns.iter().filter(|o| o.name == c.name).count() > 1;
            let alias = match repeated {
                false => c.name.clone(),
                true => crate::output_names::repeated_name(&c.name, position),
            };
            SelectItem::ExprWithAlias {
                expr: c.expr.clone(),
                alias: Ident::with_quote('"', alias),
            }
        })
        .collect();
    *projection = std::mem::take(projection)
        .into_iter()
        .flat_map(|item| {
            if plain(&item) {
                listed.clone()
            } else {
                vec![item]
            }
        })
        .collect();
}

/// Replaces unqualified references to `merged` names in `expr`, outside subqueries.
fn replace_references(expr: &mut Expr, merged: &HashMap<String, Expr>) {
    if merged.is_empty() {
        return;
    }
    let _ = expr.visit(&mut ReplaceReferences {
        merged,
        subquery_depth: 0,
    });
}

struct ReplaceReferences<'a> {
    merged: &'a HashMap<String, Expr>,
    subquery_depth: usize,
}

impl VisitorMut for ReplaceReferences<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.subquery_depth += 1;
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.subquery_depth -= 1;
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if self.subquery_depth == 0
            && let Expr::Identifier(ident) = expr
            && let Some(merged) = self.merged.get(&normalized(ident))
        {
            *expr = merged.clone();
        }
        ControlFlow::Continue(())
    }
}

/// An identifier as DataFusion resolves it: unquoted ones fold to lower case.
fn normalized(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}
