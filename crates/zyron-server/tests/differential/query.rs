//! Random queries over a [`Schema`]: joins of every kind, correlated and
//! uncorrelated subqueries, aggregates, window functions, CASE, set
//! operations and ORDER BY with LIMIT. Every query is valid PostgreSQL whose
//! answer does not depend on the plan: a LIMIT follows an ORDER BY of every
//! output column, and a window orders by every column of its table.

use super::rng::Rng;
use super::schema::{FAMILIES, Family, Schema, Table, text_literal};

/// Nesting of expressions and of subqueries: deep enough for a correlated
/// subquery inside a CASE inside a comparison.
const MAX_EXPR_DEPTH: usize = 3;
const MAX_SUBQUERY_DEPTH: usize = 2;
const MAX_ITEMS: usize = 3;

/// A column reference a scope can see.
#[derive(Clone)]
struct Visible {
    sql: String,
    family: Family,
}

/// The columns an expression may read: its own FROM clause's, then those of
/// the queries around it (which makes a subquery correlated).
#[derive(Clone, Default)]
struct Scope {
    columns: Vec<Visible>,
    /// Aggregates are allowed (a select list or HAVING of a grouped query).
    aggregates: bool,
}

impl Scope {
    fn of(&self, family: Family) -> Vec<&Visible> {
        self.columns.iter().filter(|c| c.family == family).collect()
    }
}

/// A generated statement and what the comparison needs to know of it.
pub struct Query {
    pub sql: String,
    /// The rows come in a defined order (ORDER BY every output column).
    pub ordered: bool,
}

/// A select whose WHERE the TLP oracle can partition: `SELECT items FROM from`.
pub struct Partitionable {
    pub items: String,
    pub from: String,
    pub predicate: String,
}

pub struct Generator<'a> {
    rng: &'a mut Rng,
    schema: &'a Schema,
    next_alias: usize,
    subquery_depth: usize,
}

impl<'a> Generator<'a> {
    pub fn new(rng: &'a mut Rng, schema: &'a Schema) -> Self {
        Self {
            rng,
            schema,
            next_alias: 0,
            subquery_depth: 0,
        }
    }

    pub fn query(&mut self) -> Query {
        match self.rng.below(10) {
            0..=3 => self.plain_select(),
            4..=5 => self.grouped_select(),
            6 => self.window_select(),
            7 => self.set_operation(),
            _ => self.ordered_select(),
        }
    }

    /// A select and a predicate for the TLP oracle.
    pub fn partitionable(&mut self) -> Partitionable {
        let (from, scope) = self.from_clause();
        let families = self.families();
        let items = self.items(&scope, &families);
        let predicate = self.predicate(&scope, 0);
        Partitionable {
            items: items.join(", "),
            from,
            predicate,
        }
    }

    fn families(&mut self) -> Vec<Family> {
        (0..1 + self.rng.below(MAX_ITEMS))
            .map(|_| *self.rng.pick(&FAMILIES))
            .collect()
    }

    fn alias(&mut self, prefix: &str) -> String {
        self.next_alias += 1;
        format!("{prefix}{}", self.next_alias)
    }

    fn random_table(&mut self) -> &'a Table {
        let schema = self.schema;
        self.rng.pick(&schema.tables)
    }

    /// `t AS aN` and the columns it shows.
    fn table_ref(&mut self) -> (String, Vec<Visible>) {
        let table = self.random_table();
        let alias = self.alias("a");
        let columns = table
            .columns
            .iter()
            .map(|c| Visible {
                sql: format!("{alias}.{}", c.name),
                family: c.ty.family(),
            })
            .collect();
        (format!("{} AS {alias}", table.name), columns)
    }

    fn from_clause(&mut self) -> (String, Scope) {
        let (left, mut columns) = self.table_ref();
        if self.rng.chance(45) {
            return (
                left,
                Scope {
                    columns,
                    aggregates: false,
                },
            );
        }
        let (right, right_columns) = self.table_ref();
        let kind = *self
            .rng
            .pick(&["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "CROSS JOIN"]);
        let both = {
            let mut all = columns.clone();
            all.extend(right_columns.iter().cloned());
            Scope {
                columns: all,
                aggregates: false,
            }
        };
        let condition = match kind {
            "CROSS JOIN" => String::new(),
            // PostgreSQL runs a FULL JOIN only on conditions it can hash or merge.
            "FULL JOIN" => match self.equality(&columns, &right_columns) {
                Some(equality) => format!(" ON {equality}"),
                None => " ON TRUE".to_owned(),
            },
            _ => {
                let mut on = self.equality(&columns, &right_columns);
                if on.is_none() || self.rng.chance(30) {
                    let predicate = self.predicate(&both, 1);
                    on = Some(match on {
                        Some(eq) => format!("{eq} AND {predicate}"),
                        None => predicate,
                    });
                }
                format!(" ON {}", on.unwrap())
            }
        };
        columns.extend(right_columns);
        (
            format!("{left} {kind} {right}{condition}"),
            Scope {
                columns,
                aggregates: false,
            },
        )
    }

    /// `l = r` over two columns of one family, if the sides have such a pair.
    fn equality(&mut self, left: &[Visible], right: &[Visible]) -> Option<String> {
        let pairs: Vec<(&Visible, &Visible)> = left
            .iter()
            .flat_map(|l| right.iter().map(move |r| (l, r)))
            .filter(|(l, r)| l.family == r.family)
            .collect();
        if pairs.is_empty() {
            return None;
        }
        let (l, r) = *self.rng.pick(&pairs);
        Some(format!("{} = {}", l.sql, r.sql))
    }

    fn items(&mut self, scope: &Scope, families: &[Family]) -> Vec<String> {
        families
            .iter()
            .enumerate()
            .map(|(i, family)| format!("{} AS x{i}", self.expr(*family, scope, 0)))
            .collect()
    }

    fn where_clause(&mut self, scope: &Scope) -> String {
        if self.rng.chance(70) {
            format!(" WHERE {}", self.predicate(scope, 0))
        } else {
            String::new()
        }
    }

    fn plain_select(&mut self) -> Query {
        let families = self.families();
        let sql = self.select_of(&families);
        Query {
            sql,
            ordered: false,
        }
    }

    fn select_of(&mut self, families: &[Family]) -> String {
        let (from, scope) = self.from_clause();
        let distinct = if self.rng.chance(20) { "DISTINCT " } else { "" };
        let items = self.items(&scope, families);
        let filter = self.where_clause(&scope);
        format!("SELECT {distinct}{} FROM {from}{filter}", items.join(", "))
    }

    fn ordered_select(&mut self) -> Query {
        let families = self.families();
        let select = self.select_of(&families);
        let order: Vec<String> = (1..=families.len())
            .map(|i| {
                let direction = self
                    .rng
                    .pick(&["", " DESC", " NULLS FIRST", " DESC NULLS LAST"]);
                format!("{i}{direction}")
            })
            .collect();
        let limit = if self.rng.chance(70) {
            format!(" LIMIT {}", self.rng.below(6))
        } else {
            String::new()
        };
        let offset = if self.rng.chance(30) {
            format!(" OFFSET {}", self.rng.below(4))
        } else {
            String::new()
        };
        Query {
            sql: format!("{select} ORDER BY {}{limit}{offset}", order.join(", ")),
            ordered: true,
        }
    }

    fn grouped_select(&mut self) -> Query {
        let (from, scope) = self.from_clause();
        let keys: Vec<String> = (0..self.rng.below(3))
            .map(|_| self.rng.pick(&scope.columns).sql.clone())
            .collect();
        let mut items: Vec<String> = keys.clone();
        let aggregated = Scope {
            columns: scope.columns.clone(),
            aggregates: true,
        };
        for _ in 0..1 + self.rng.below(2) {
            let family = *self.rng.pick(&FAMILIES);
            items.push(self.aggregate(family, &scope));
        }
        let items: Vec<String> = items
            .iter()
            .enumerate()
            .map(|(i, item)| format!("{item} AS x{i}"))
            .collect();
        let filter = self.where_clause(&scope);
        let group_by = if keys.is_empty() {
            String::new()
        } else {
            format!(" GROUP BY {}", keys.join(", "))
        };
        let having = if self.rng.chance(30) {
            let family = *self
                .rng
                .pick(&[Family::Integer, Family::Float, Family::Text]);
            let aggregate = self.aggregate(family, &aggregated);
            let bound = self.leaf(family, &Scope::default());
            let op = self.rng.pick(&["=", "<>", "<", ">=", "IS DISTINCT FROM"]);
            format!(" HAVING {aggregate} {op} {bound}")
        } else {
            String::new()
        };
        Query {
            sql: format!(
                "SELECT {} FROM {from}{filter}{group_by}{having}",
                items.join(", ")
            ),
            ordered: false,
        }
    }

    /// An aggregate call yielding `family`, over expressions of `scope`.
    fn aggregate(&mut self, family: Family, scope: &Scope) -> String {
        let plain = Scope {
            columns: scope.columns.clone(),
            aggregates: false,
        };
        // Arguments without subqueries: PostgreSQL allows them, but they say
        // little about aggregation.
        let depth = self.subquery_depth;
        self.subquery_depth = MAX_SUBQUERY_DEPTH;
        let call = match family {
            Family::Integer => match self.rng.below(5) {
                0 => "count(*)".to_owned(),
                1 => {
                    let arg_family = *self.rng.pick(&FAMILIES);
                    format!("count({})", self.expr(arg_family, &plain, 1))
                }
                2 => format!("count(DISTINCT {})", self.expr(Family::Integer, &plain, 1)),
                3 => format!("sum({})", self.expr(Family::Integer, &plain, 1)),
                _ => format!(
                    "{}({})",
                    self.rng.pick(&["min", "max"]),
                    self.expr(Family::Integer, &plain, 1)
                ),
            },
            Family::Float => match self.rng.below(3) {
                0 => format!("avg({})", self.expr(Family::Integer, &plain, 1)),
                1 => format!("sum({})", self.expr(Family::Float, &plain, 1)),
                _ => format!(
                    "{}({})",
                    self.rng.pick(&["min", "max", "avg"]),
                    self.expr(Family::Float, &plain, 1)
                ),
            },
            Family::Text => format!(
                "{}({})",
                self.rng.pick(&["min", "max"]),
                self.expr(Family::Text, &plain, 1)
            ),
            Family::Bool => format!(
                "{}({})",
                self.rng.pick(&["bool_and", "bool_or"]),
                self.expr(Family::Bool, &plain, 1)
            ),
        };
        self.subquery_depth = depth;
        call
    }

    fn window_select(&mut self) -> Query {
        let table = self.random_table();
        let alias = self.alias("a");
        let scope = Scope {
            columns: table
                .columns
                .iter()
                .map(|c| Visible {
                    sql: format!("{alias}.{}", c.name),
                    family: c.ty.family(),
                })
                .collect(),
            aggregates: false,
        };
        let every_column: Vec<String> = scope.columns.iter().map(|c| c.sql.clone()).collect();
        let partition = if self.rng.chance(60) {
            format!("PARTITION BY {} ", self.rng.pick(&scope.columns).sql)
        } else {
            String::new()
        };
        let ints = scope.of(Family::Integer);
        let argument = match ints.is_empty() {
            true => "1".to_owned(),
            false => self.rng.pick(&ints).sql.clone(),
        };
        let function = match self.rng.below(7) {
            0 => "row_number()".to_owned(),
            1 => "rank()".to_owned(),
            2 => "dense_rank()".to_owned(),
            3 => format!("sum({argument})"),
            4 => "count(*)".to_owned(),
            5 => format!("lag({argument})"),
            _ => format!("max({argument})"),
        };
        let families = self.families();
        let mut items = self.items(&scope, &families);
        items.push(format!(
            "{function} OVER ({partition}ORDER BY {}) AS w",
            every_column.join(", ")
        ));
        let filter = self.where_clause(&scope);
        Query {
            sql: format!(
                "SELECT {} FROM {} AS {alias}{filter}",
                items.join(", "),
                table.name
            ),
            ordered: false,
        }
    }

    fn set_operation(&mut self) -> Query {
        let families = self.families();
        let left = self.select_of(&families);
        let right = self.select_of(&families);
        let op = self.rng.pick(&[
            "UNION",
            "UNION ALL",
            "INTERSECT",
            "INTERSECT ALL",
            "EXCEPT",
            "EXCEPT ALL",
        ]);
        Query {
            sql: format!("({left}) {op} ({right})"),
            ordered: false,
        }
    }

    /// An expression yielding `family`.
    fn expr(&mut self, family: Family, scope: &Scope, depth: usize) -> String {
        if depth >= MAX_EXPR_DEPTH || self.rng.chance(35) {
            return self.leaf(family, scope);
        }
        let depth = depth + 1;
        if scope.aggregates && self.rng.chance(20) {
            return self.aggregate(family, scope);
        }
        match family {
            Family::Integer => self.integer_expr(scope, depth),
            Family::Float => self.float_expr(scope, depth),
            Family::Text => self.text_expr(scope, depth),
            Family::Bool => self.predicate(scope, depth),
        }
    }

    /// A column of `family` most of the time, else a literal.
    fn leaf(&mut self, family: Family, scope: &Scope) -> String {
        let columns = scope.of(family);
        if !columns.is_empty() && self.rng.chance(75) {
            return self.rng.pick(&columns).sql.clone();
        }
        self.literal(family)
    }

    /// A literal; extremes live in the tables' values only, as PostgreSQL
    /// evaluates constant expressions while planning and fails on an overflow
    /// in a branch or a row that is never reached.
    fn literal(&mut self, family: Family) -> String {
        if self.rng.chance(5) {
            let ty = match family {
                Family::Integer => "INTEGER",
                Family::Float => "DOUBLE PRECISION",
                Family::Text => "TEXT",
                Family::Bool => "BOOLEAN",
            };
            return format!("CAST(NULL AS {ty})");
        }
        match family {
            Family::Integer => self
                .rng
                .pick(&["0", "1", "2", "3", "-1", "-2", "10"])
                .to_string(),
            Family::Float => format!(
                "CAST({} AS DOUBLE PRECISION)",
                self.rng.pick(&["0.5", "-1.5", "2", "0", "-2.5"])
            ),
            Family::Text => text_literal(self.rng),
            Family::Bool => self.rng.pick(&["TRUE", "FALSE"]).to_string(),
        }
    }

    fn integer_expr(&mut self, scope: &Scope, depth: usize) -> String {
        let sub = |g: &mut Self, f: Family| g.expr(f, scope, depth);
        match self.rng.below(12) {
            0 | 1 => {
                let op = self.rng.pick(&["+", "-", "*"]);
                format!(
                    "({} {op} {})",
                    sub(self, Family::Integer),
                    sub(self, Family::Integer)
                )
            }
            2 => {
                let op = self.rng.pick(&["/", "%"]);
                format!(
                    "({} {op} NULLIF({}, 0))",
                    sub(self, Family::Integer),
                    sub(self, Family::Integer)
                )
            }
            3 => format!("abs({})", sub(self, Family::Integer)),
            4 => format!("(- ({}))", sub(self, Family::Integer)),
            5 => self.case(Family::Integer, scope, depth),
            6 => format!(
                "COALESCE({}, {})",
                sub(self, Family::Integer),
                sub(self, Family::Integer)
            ),
            7 => format!("length({})", sub(self, Family::Text)),
            8 => format!("CAST({} AS INTEGER)", sub(self, Family::Float)),
            9 => format!(
                "NULLIF({}, {})",
                sub(self, Family::Integer),
                sub(self, Family::Integer)
            ),
            _ => self
                .scalar_subquery(Family::Integer, scope)
                .unwrap_or_else(|| self.leaf(Family::Integer, scope)),
        }
    }

    fn float_expr(&mut self, scope: &Scope, depth: usize) -> String {
        let sub = |g: &mut Self, f: Family| g.expr(f, scope, depth);
        match self.rng.below(7) {
            0 | 1 => {
                let op = self.rng.pick(&["+", "-", "*"]);
                format!(
                    "({} {op} {})",
                    sub(self, Family::Float),
                    sub(self, Family::Float)
                )
            }
            2 => format!("CAST({} AS DOUBLE PRECISION)", sub(self, Family::Integer)),
            3 => format!("abs({})", sub(self, Family::Float)),
            4 => self.case(Family::Float, scope, depth),
            5 => format!(
                "COALESCE({}, {})",
                sub(self, Family::Float),
                sub(self, Family::Float)
            ),
            _ => self
                .scalar_subquery(Family::Float, scope)
                .unwrap_or_else(|| self.leaf(Family::Float, scope)),
        }
    }

    fn text_expr(&mut self, scope: &Scope, depth: usize) -> String {
        let sub = |g: &mut Self, f: Family| g.expr(f, scope, depth);
        match self.rng.below(8) {
            0 => format!("upper({})", sub(self, Family::Text)),
            1 => format!("lower({})", sub(self, Family::Text)),
            2 => format!(
                "({} || {})",
                sub(self, Family::Text),
                sub(self, Family::Text)
            ),
            3 => format!("substr({}, 1, 2)", sub(self, Family::Text)),
            4 => self.case(Family::Text, scope, depth),
            5 => format!(
                "COALESCE({}, {})",
                sub(self, Family::Text),
                sub(self, Family::Text)
            ),
            6 => format!("CAST({} AS TEXT)", sub(self, Family::Integer)),
            _ => self
                .scalar_subquery(Family::Text, scope)
                .unwrap_or_else(|| self.leaf(Family::Text, scope)),
        }
    }

    fn case(&mut self, family: Family, scope: &Scope, depth: usize) -> String {
        let when = self.predicate(scope, depth);
        let then = self.expr(family, scope, depth);
        let otherwise = if self.rng.chance(80) {
            format!(" ELSE {}", self.expr(family, scope, depth))
        } else {
            String::new()
        };
        format!("CASE WHEN {when} THEN {then}{otherwise} END")
    }

    /// A boolean expression.
    fn predicate(&mut self, scope: &Scope, depth: usize) -> String {
        if depth >= MAX_EXPR_DEPTH {
            return self.comparison(scope, depth);
        }
        let depth = depth + 1;
        match self.rng.below(16) {
            0..=3 => self.comparison(scope, depth),
            4 => format!(
                "({} AND {})",
                self.predicate(scope, depth),
                self.predicate(scope, depth)
            ),
            5 => format!(
                "({} OR {})",
                self.predicate(scope, depth),
                self.predicate(scope, depth)
            ),
            6 => format!("(NOT {})", self.predicate(scope, depth)),
            7 => {
                let family = *self.rng.pick(&FAMILIES);
                let not = if self.rng.chance(50) { " NOT" } else { "" };
                format!("({} IS{not} NULL)", self.expr(family, scope, depth))
            }
            8 => {
                let family = *self
                    .rng
                    .pick(&[Family::Integer, Family::Float, Family::Text]);
                let not = if self.rng.chance(30) { " NOT" } else { "" };
                format!(
                    "({}{not} BETWEEN {} AND {})",
                    self.expr(family, scope, depth),
                    self.expr(family, scope, depth),
                    self.expr(family, scope, depth)
                )
            }
            9 => {
                let family = *self.rng.pick(&[Family::Integer, Family::Text]);
                let not = if self.rng.chance(30) { " NOT" } else { "" };
                let list: Vec<String> = (0..1 + self.rng.below(3))
                    .map(|_| self.expr(family, scope, depth))
                    .collect();
                format!(
                    "({}{not} IN ({}))",
                    self.expr(family, scope, depth),
                    list.join(", ")
                )
            }
            10 | 11 => self
                .in_subquery(scope, depth)
                .unwrap_or_else(|| self.comparison(scope, depth)),
            12 => self
                .exists(scope)
                .unwrap_or_else(|| self.comparison(scope, depth)),
            13 => {
                let not = if self.rng.chance(30) { " NOT" } else { "" };
                let pattern = self
                    .rng
                    .pick(&["'a%'", "'%b'", "'_'", "'%'", "'a_c'", "''"]);
                format!(
                    "({}{not} LIKE {pattern})",
                    self.expr(Family::Text, scope, depth)
                )
            }
            14 => {
                let bools = scope.of(Family::Bool);
                match bools.is_empty() {
                    true => self.comparison(scope, depth),
                    false => self.rng.pick(&bools).sql.clone(),
                }
            }
            _ => {
                let family = *self.rng.pick(&FAMILIES);
                let not = if self.rng.chance(50) { " NOT" } else { "" };
                format!(
                    "({} IS{not} DISTINCT FROM {})",
                    self.expr(family, scope, depth),
                    self.expr(family, scope, depth)
                )
            }
        }
    }

    fn comparison(&mut self, scope: &Scope, depth: usize) -> String {
        let family = *self.rng.pick(&FAMILIES);
        let op = self.rng.pick(&["=", "<>", "<", "<=", ">", ">="]);
        let (left, right) = if depth >= MAX_EXPR_DEPTH {
            (self.leaf(family, scope), self.leaf(family, scope))
        } else {
            (
                self.expr(family, scope, depth),
                self.expr(family, scope, depth),
            )
        };
        format!("({left} {op} {right})")
    }

    /// `FROM t AS sN WHERE ...` of a subquery, its scope (its own columns
    /// first, then the outer ones) and its own columns.
    fn subquery_body(&mut self, outer: &Scope) -> (String, Scope, Vec<Visible>) {
        let (from, own) = self.table_ref();
        let mut columns = own.clone();
        columns.extend(outer.columns.iter().cloned());
        let scope = Scope {
            columns,
            aggregates: false,
        };
        let correlation = if self.rng.chance(65) {
            self.equality(&own, &outer.columns)
        } else {
            None
        };
        let extra = self.rng.chance(50).then(|| self.predicate(&scope, 1));
        let conditions: Vec<String> = correlation.into_iter().chain(extra).collect();
        let filter = match conditions.is_empty() {
            true => String::new(),
            false => format!(" WHERE {}", conditions.join(" AND ")),
        };
        (format!("FROM {from}{filter}"), scope, own)
    }

    fn enter_subquery(&mut self) -> bool {
        if self.subquery_depth >= MAX_SUBQUERY_DEPTH {
            return false;
        }
        self.subquery_depth += 1;
        true
    }

    /// `(SELECT agg(..) FROM .. WHERE ..)`, or a single-row form without an aggregate.
    fn scalar_subquery(&mut self, family: Family, outer: &Scope) -> Option<String> {
        if !self.enter_subquery() {
            return None;
        }
        let (body, scope, _) = self.subquery_body(outer);
        let sql = if self.rng.chance(80) {
            let aggregate = self.aggregate(family, &scope);
            format!("(SELECT {aggregate} {body})")
        } else {
            // One row without an aggregate; ties in the order have equal values.
            let item = self.leaf(family, &scope);
            format!("(SELECT {item} {body} ORDER BY 1 LIMIT 1)")
        };
        self.subquery_depth -= 1;
        Some(sql)
    }

    fn in_subquery(&mut self, outer: &Scope, depth: usize) -> Option<String> {
        let family = *self.rng.pick(&[Family::Integer, Family::Text]);
        let probe = self.expr(family, outer, depth);
        if !self.enter_subquery() {
            return None;
        }
        let (body, scope, own) = self.subquery_body(outer);
        let own_scope = Scope {
            columns: own,
            aggregates: false,
        };
        let item = if self.rng.chance(70) {
            self.leaf(family, &own_scope)
        } else {
            self.expr(family, &scope, 1)
        };
        self.subquery_depth -= 1;
        let not = if self.rng.chance(40) { " NOT" } else { "" };
        Some(format!("({probe}{not} IN (SELECT {item} {body}))"))
    }

    fn exists(&mut self, outer: &Scope) -> Option<String> {
        if !self.enter_subquery() {
            return None;
        }
        let (body, _, _) = self.subquery_body(outer);
        self.subquery_depth -= 1;
        let not = if self.rng.chance(40) { "NOT " } else { "" };
        Some(format!("({not}EXISTS (SELECT 1 {body}))"))
    }
}
