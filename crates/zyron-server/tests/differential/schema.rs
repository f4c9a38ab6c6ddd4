//! Random tables and rows: few distinct values, so that joins, GROUP BY and
//! DISTINCT meet duplicates, plus NULLs and the extremes of each type.

use super::rng::Rng;

/// What an expression yields, as far as the generator cares: INTEGER and
/// BIGINT columns mix freely in arithmetic and comparisons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Integer,
    Float,
    Text,
    Bool,
}

pub const FAMILIES: [Family; 4] = [Family::Integer, Family::Float, Family::Text, Family::Bool];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnType {
    Int,
    BigInt,
    Double,
    Text,
    Bool,
}

impl ColumnType {
    pub fn sql(self) -> &'static str {
        match self {
            Self::Int => "INTEGER",
            Self::BigInt => "BIGINT",
            Self::Double => "DOUBLE PRECISION",
            Self::Text => "TEXT",
            Self::Bool => "BOOLEAN",
        }
    }

    pub fn family(self) -> Family {
        match self {
            Self::Int | Self::BigInt => Family::Integer,
            Self::Double => Family::Float,
            Self::Text => Family::Text,
            Self::Bool => Family::Bool,
        }
    }
}

const COLUMN_TYPES: [ColumnType; 5] = [
    ColumnType::Int,
    ColumnType::BigInt,
    ColumnType::Double,
    ColumnType::Text,
    ColumnType::Bool,
];

pub struct Column {
    pub name: String,
    pub ty: ColumnType,
}

pub struct Table {
    pub name: String,
    pub columns: Vec<Column>,
    /// The first column is an INTEGER primary key.
    pub primary_key: bool,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn create_sql(&self) -> String {
        let columns: Vec<String> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let key = if i == 0 && self.primary_key {
                    " PRIMARY KEY"
                } else {
                    ""
                };
                format!("{} {}{key}", c.name, c.ty.sql())
            })
            .collect();
        format!("CREATE TABLE {} ({})", self.name, columns.join(", "))
    }

    /// One INSERT for all rows, or `None` for an empty table.
    pub fn insert_sql(&self) -> Option<String> {
        if self.rows.is_empty() {
            return None;
        }
        let rows: Vec<String> = self
            .rows
            .iter()
            .map(|row| format!("({})", row.join(", ")))
            .collect();
        Some(format!(
            "INSERT INTO {} VALUES {}",
            self.name,
            rows.join(", ")
        ))
    }
}

pub struct Schema {
    pub tables: Vec<Table>,
}

const MAX_TABLES: usize = 3;
const MAX_COLUMNS: usize = 4;
const MAX_ROWS: usize = 24;

impl Schema {
    pub fn random(rng: &mut Rng) -> Self {
        let tables = (0..1 + rng.below(MAX_TABLES))
            .map(|t| random_table(rng, format!("t{t}")))
            .collect();
        Self { tables }
    }

    /// The statements that create and fill this schema's tables.
    pub fn setup_sql(&self) -> Vec<String> {
        self.tables
            .iter()
            .flat_map(|t| std::iter::once(t.create_sql()).chain(t.insert_sql()))
            .collect()
    }

    /// Drops what an earlier schema of this generator created.
    pub fn drop_sql() -> Vec<String> {
        (0..MAX_TABLES)
            .map(|t| format!("DROP TABLE IF EXISTS t{t}"))
            .collect()
    }
}

fn random_table(rng: &mut Rng, name: String) -> Table {
    let primary_key = rng.chance(40);
    let columns: Vec<Column> = (0..1 + rng.below(MAX_COLUMNS))
        .map(|c| Column {
            name: format!("c{c}"),
            ty: if c == 0 && primary_key {
                ColumnType::Int
            } else {
                *rng.pick(&COLUMN_TYPES)
            },
        })
        .collect();
    let row_count = if rng.chance(10) {
        0
    } else {
        rng.below(MAX_ROWS + 1)
    };
    let rows = (0..row_count)
        .map(|r| {
            columns
                .iter()
                .enumerate()
                .map(|(c, column)| {
                    if c == 0 && primary_key {
                        // Unique, but not in insertion order.
                        ((r as i64 * 7) % 31 - 10).to_string()
                    } else {
                        value(rng, column.ty)
                    }
                })
                .collect()
        })
        .collect();
    Table {
        name,
        columns,
        primary_key,
        rows,
    }
}

/// A literal of `ty`: NULL one time in six, an extreme now and then.
pub fn value(rng: &mut Rng, ty: ColumnType) -> String {
    if rng.chance(16) {
        return "NULL".to_owned();
    }
    let extreme = rng.chance(3);
    match ty {
        ColumnType::Int if extreme => rng.pick(&["2147483647", "-2147483648"]).to_string(),
        ColumnType::BigInt if extreme => rng
            .pick(&["9223372036854775807", "-9223372036854775808"])
            .to_string(),
        ColumnType::Int | ColumnType::BigInt => (rng.below(9) as i64 - 3).to_string(),
        ColumnType::Double if extreme => {
            rng.pick(&["1e300", "-1e-300", "123456789.125"]).to_string()
        }
        ColumnType::Double => format!("{}", (rng.below(13) as f64 - 6.0) * 0.5),
        ColumnType::Text => text_literal(rng),
        ColumnType::Bool => rng.pick(&["TRUE", "FALSE"]).to_string(),
    }
}

pub fn text_literal(rng: &mut Rng) -> String {
    let text = rng.pick(&["", "a", "b", "ab", "ba", "abc", "A", "B a", "zz"]);
    format!("'{text}'")
}
