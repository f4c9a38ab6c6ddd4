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
//! The same pass gives `count(t.*)` PostgreSQL's meaning, the rows where `t`
//! has a row (DataFusion counted every row, also those an outer join padded).
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

/// Rewrites every select of `statement` that joins with `USING` or `NATURAL`
/// or counts whole rows (`count(t.*)`).
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
        || ast::visit_expressions(statement, |expr| match expr {
            Expr::Function(function) if counted_relation(function).is_some() => {
                ControlFlow::Break(())
            }
            _ => ControlFlow::Continue(()),
        })
        .is_break()
}

struct FindUsingJoin(bool);

impl ast::Visitor for FindUsingJoin {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        if branch_merges_columns(&query.body) {
            self.0 = true;
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

fn branch_merges_columns(body: &SetExpr) -> bool {
    match body {
        SetExpr::Select(select) => select.from.iter().any(merges_columns),
        SetExpr::SetOperation { left, right, .. } => {
            branch_merges_columns(left) || branch_merges_columns(right)
        }
        _ => false,
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
        match body.as_mut() {
            SetExpr::Select(select) => {
                let order_by = order_by.as_mut().and_then(|o| match &mut o.kind {
                    OrderByKind::Expressions(exprs) => Some(exprs),
                    OrderByKind::All(_) => None,
                });
                self.rewrite(select, order_by);
            }
            // ORDER BY of a set operation reads its output columns.
            body => self.rewrite_branches(body),
        }
        ControlFlow::Continue(())
    }
}

impl MergeJoinColumns<'_> {
    /// The selects of a set operation that are not queries of their own.
    fn rewrite_branches(&self, body: &mut SetExpr) {
        match body {
            SetExpr::Select(select) => self.rewrite(select, None),
            SetExpr::SetOperation { left, right, .. } => {
                self.rewrite_branches(left);
                self.rewrite_branches(right);
            }
            _ => {}
        }
    }

    fn rewrite(&self, select: &mut Select, mut order_by: Option<&mut Vec<ast::OrderByExpr>>) {
        self.count_whole_rows(select, order_by.as_deref_mut());
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
        let outputs: HashSet<String> = select.projection.iter().filter_map(output_name).collect();
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
        // A bare name in ORDER BY reads the output column of that name first.
        for order in order_by.into_iter().flatten() {
            let output =
                matches!(&order.expr, Expr::Identifier(i) if outputs.contains(&normalized(i)));
            if !output {
                replace_references(&mut order.expr, &merged);
            }
        }
    }

    /// `count(t.*)` counts the rows where `t` has a row, which over the
    /// side an outer join pads is not every row; DataFusion counts them all.
    /// There it becomes `count(*) FILTER (WHERE t has a value)`, which misses
    /// only a row of `t` whose every column is NULL.
    fn count_whole_rows(&self, select: &mut Select, order_by: Option<&mut Vec<ast::OrderByExpr>>) {
        let from = &select.from;
        let mut targets: Vec<&mut Expr> = Vec::new();
        for item in &mut select.projection {
            if let SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } = item {
                targets.push(expr);
            }
        }
        targets.extend(select.having.as_mut());
        targets.extend(order_by.into_iter().flatten().map(|o| &mut o.expr));
        for expr in targets {
            for_each_outside_subqueries(expr, |e| self.count_whole_row(e, from));
        }
    }

    /// The columns of the FROM item called `name` in `from`, at any depth,
    /// if an outer join pads its rows with NULLs (only then can `t.*` be
    /// NULL); `padded_outside` says the whole of `from` is padded.
    fn padded_relation_columns(
        &self,
        from: &[TableWithJoins],
        name: &str,
        padded_outside: bool,
    ) -> Option<Vec<Column>> {
        let named = |factor: &TableFactor| match factor {
            TableFactor::Table { alias: Some(a), .. }
            | TableFactor::Derived { alias: Some(a), .. }
            | TableFactor::NestedJoin { alias: Some(a), .. } => normalized(&a.name) == name,
            TableFactor::Table {
                name: table,
                alias: None,
                ..
            } => table
                .0
                .last()
                .and_then(|p| p.as_ident())
                .is_some_and(|i| normalized(i) == name),
            _ => false,
        };
        for tables in from {
            for (factor, padded) in padded_factors(tables) {
                let padded = padded || padded_outside;
                if named(factor) {
                    return padded.then(|| self.factor_columns(&mut factor.clone()))?;
                }
                if let TableFactor::NestedJoin {
                    table_with_joins,
                    alias: None,
                } = factor
                    && let Some(columns) = self.padded_relation_columns(
                        std::slice::from_ref(table_with_joins.as_ref()),
                        name,
                        padded,
                    )
                {
                    return Some(columns);
                }
            }
        }
        None
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
                    read_merged_in_condition(&mut join.join_operator, &columns, &right);
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
            // DataFusion joins USING on the first column of each name it finds
            // on each side, which a merged column is not.
            if keys.iter().any(|(l, r)| l.merged || r.merged) {
                let keys = keys.into_iter().map(|(l, r)| (l.expr, r.expr)).collect();
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
                let names = plain(self.tables.get(&reference)?.clone());
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
                        let names = plain(columns.into_iter().map(|c| c.name).collect());
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

/// An `ON` condition's unqualified references to a column merged on the left,
/// which the right side does not also have, read the merged value.
fn read_merged_in_condition(operator: &mut JoinOperator, left: &[Column], right: &[Column]) {
    let Some(JoinConstraint::On(condition)) = constraint_mut(operator) else {
        return;
    };
    let merged: HashMap<String, Expr> = left
        .iter()
        .filter(|c| c.merged && !right.iter().any(|r| r.name == c.name))
        .map(|c| (c.name.clone(), c.expr.clone()))
        .collect();
    replace_references(condition, &merged);
}

/// `left` joined with `right` on `names`: the merged columns first, then the
/// rest of each side, and the pairs of values the join compares. `None` if a
/// name is missing from a side or repeated in it.
fn merge(
    left: Vec<Column>,
    right: Vec<Column>,
    names: &[String],
    how: Merge,
) -> Option<(Vec<Column>, Vec<(Column, Column)>)> {
    let find = |side: &[Column], name: &str| {
        let mut found = side.iter().filter(|c| c.name == name);
        let first = found.next()?.clone();
        found.next().is_none().then_some(first)
    };
    let mut columns = Vec::with_capacity(left.len() + right.len());
    let mut keys = Vec::with_capacity(names.len());
    for name in names {
        let (l, r) = (find(&left, name)?, find(&right, name)?);
        keys.push((l.clone(), r.clone()));
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

/// `names` (as the client sees them, and as DataFusion has them) as columns
/// of the relation called `qualifier`.
fn qualified(qualifier: &[Ident], names: Vec<(String, String)>) -> Option<Vec<Column>> {
    Some(
        names
            .into_iter()
            .map(|(name, real)| {
                let mut parts = qualifier.to_vec();
                parts.push(Ident::with_quote('"', real));
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
fn renamed(
    mut names: Vec<(String, String)>,
    alias: Option<&ast::TableAlias>,
) -> Option<Vec<(String, String)>> {
    let renames = alias.map_or(&[][..], |a| a.columns.as_slice());
    if renames.len() > names.len() {
        return None;
    }
    for (name, rename) in names.iter_mut().zip(renames) {
        let renamed = normalized(&rename.name);
        *name = (renamed.clone(), renamed);
    }
    Some(names)
}

/// Names a table's columns have both for the client and in DataFusion.
fn plain(names: Vec<String>) -> Vec<(String, String)> {
    names.into_iter().map(|n| (n.clone(), n)).collect()
}

/// The column names of a subquery whose select list names every column: as
/// the client sees them, and as DataFusion has them (a repeat keeps a hidden
/// suffix, see `output_names`).
fn output_names(query: &Query) -> Option<Vec<(String, String)>> {
    let select = match query.body.as_ref() {
        SetExpr::Select(select) => select,
        SetExpr::Values(values) => {
            let width = values.rows.first()?.len();
            return Some(plain((1..=width).map(|n| format!("column{n}")).collect()));
        }
        _ => return None,
    };
    select
        .projection
        .iter()
        .map(|item| {
            let client = output_name(item)?;
            let real = match item {
                SelectItem::ExprWithAlias { alias, .. } => normalized(alias),
                _ => client.clone(),
            };
            Some((client, real))
        })
        .collect()
}

/// The name a select item gives its column, as the client sees it.
fn output_name(item: &SelectItem) -> Option<String> {
    match item {
        SelectItem::ExprWithAlias { alias, .. } => {
            Some(crate::output_names::client_name(&normalized(alias)).to_owned())
        }
        SelectItem::UnnamedExpr(Expr::Identifier(ident)) => Some(normalized(ident)),
        SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) => parts.last().map(normalized),
        _ => None,
    }
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
    let beside: Vec<String> = projection.iter().filter_map(output_name).collect();
    let listed: Vec<SelectItem> = columns
        .iter()
        .enumerate()
        .map(|(position, c)| {
            if !c.merged {
                return SelectItem::UnnamedExpr(c.expr.clone());
            }
            let repeated =
                columns.iter().filter(|o| o.name == c.name).count() > 1 || beside.contains(&c.name);
            // Numbered apart from the select list's own repeats (`output_names`).
            let alias = match repeated {
                false => c.name.clone(),
                true => crate::output_names::repeated_name(&c.name, position) + "u",
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
    for_each_outside_subqueries(expr, |expr| {
        if let Expr::Identifier(ident) = expr
            && let Some(merged) = merged.get(&normalized(ident))
        {
            *expr = merged.clone();
        }
    });
}

/// Calls `f` on every expression in `expr` that is not inside a subquery.
fn for_each_outside_subqueries(expr: &mut Expr, f: impl FnMut(&mut Expr)) {
    let _ = expr.visit(&mut OutsideSubqueries { f, depth: 0 });
}

struct OutsideSubqueries<F> {
    f: F,
    depth: usize,
}

impl<F: FnMut(&mut Expr)> VisitorMut for OutsideSubqueries<F> {
    type Break = ();

    fn pre_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.depth += 1;
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if self.depth == 0 {
            (self.f)(expr);
        }
        ControlFlow::Continue(())
    }
}

impl MergeJoinColumns<'_> {
    /// `count(t.*)` as `count(*) FILTER (WHERE <t has a value>)`.
    fn count_whole_row(&self, expr: &mut Expr, from: &[TableWithJoins]) {
        let Expr::Function(function) = expr else {
            return;
        };
        let Some(relation) = counted_relation(function) else {
            return;
        };
        let Some(columns) = self.padded_relation_columns(from, &relation, false) else {
            return;
        };
        let has_value = columns
            .into_iter()
            .map(|c| Expr::IsNotNull(Box::new(c.expr)))
            .reduce(|a, b| Expr::BinaryOp {
                left: Box::new(a),
                op: ast::BinaryOperator::Or,
                right: Box::new(b),
            });
        let Some(has_value) = has_value else {
            return;
        };
        if let FunctionArguments::List(list) = &mut function.args {
            list.args = vec![FunctionArg::Unnamed(FunctionArgExpr::Wildcard)];
        }
        function.filter = Some(Box::new(match function.filter.take() {
            Some(filter) => Expr::BinaryOp {
                left: Box::new(Expr::Nested(filter)),
                op: ast::BinaryOperator::And,
                right: Box::new(Expr::Nested(Box::new(has_value))),
            },
            None => has_value,
        }));
    }
}

/// Each FROM item of a join tree, and whether an outer join pads its rows:
/// the left-most by a later right or full join, a joined one by its own left
/// or full join or a later right or full join.
fn padded_factors(tables: &TableWithJoins) -> Vec<(&TableFactor, bool)> {
    let pads_left = |join: &ast::Join| {
        matches!(
            join.join_operator,
            JoinOperator::Right(_) | JoinOperator::RightOuter(_) | JoinOperator::FullOuter(_)
        )
    };
    let pads_right = |join: &ast::Join| {
        matches!(
            join.join_operator,
            JoinOperator::Left(_) | JoinOperator::LeftOuter(_) | JoinOperator::FullOuter(_)
        )
    };
    let later_pads_left = |from: usize| tables.joins[from..].iter().any(pads_left);
    let mut factors = vec![(&tables.relation, later_pads_left(0))];
    for (index, join) in tables.joins.iter().enumerate() {
        factors.push((
            &join.relation,
            pads_right(join) || later_pads_left(index + 1),
        ));
    }
    factors
}

/// `t` in `count(t.*)` (not `count(DISTINCT t.*)`, not a window).
fn counted_relation(function: &Function) -> Option<String> {
    let name = function.name.0.last()?.as_ident()?;
    if normalized(name) != "count" || function.name.0.len() != 1 || function.over.is_some() {
        return None;
    }
    let FunctionArguments::List(list) = &function.args else {
        return None;
    };
    match list.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::QualifiedWildcard(relation))]
            if list.duplicate_treatment.is_none() =>
        {
            relation.0.last()?.as_ident().map(normalized)
        }
        _ => None,
    }
}

/// An identifier as DataFusion resolves it: unquoted ones fold to lower case.
fn normalized(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}
