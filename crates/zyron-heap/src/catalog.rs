//! Table definitions as the catalog stores them: in the WAL (DDL records) and
//! in checkpoint images, as JSON.

use std::str::FromStr;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};

use zyron_common::{Result, SqlState, ZyronError};

/// The schema every table lives in until `CREATE SCHEMA` exists.
pub const DEFAULT_SCHEMA: &str = "public";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnDef {
    pub name: String,
    /// The Arrow type, in Arrow's own text form (`Int64`, `Utf8View`, ...).
    pub data_type: String,
    pub nullable: bool,
    /// SQL text of the DEFAULT expression, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// A CHECK constraint: the engine evaluates `sql` against each new row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckDef {
    pub name: String,
    pub sql: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDef {
    pub id: u64,
    pub schema: String,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    /// Column positions of the primary key, in key order; empty if none.
    #[serde(default)]
    pub primary_key: Vec<usize>,
    #[serde(default)]
    pub checks: Vec<CheckDef>,
    /// `WITH (fillfactor = N)`: accepted and kept; the heap has no fixed-size
    /// pages for it to act on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fillfactor: Option<u8>,
}

impl TableDef {
    pub fn arrow_schema(&self) -> Result<SchemaRef> {
        let fields = self
            .columns
            .iter()
            .map(|c| {
                let data_type = DataType::from_str(&c.data_type).map_err(|e| {
                    ZyronError::new(
                        SqlState::DATA_CORRUPTED,
                        format!(
                            "catalog: column \"{}\" has unreadable type {}: {e}",
                            c.name, c.data_type
                        ),
                    )
                })?;
                Ok(Field::new(&c.name, data_type, c.nullable))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Arc::new(Schema::new(fields)))
    }

    /// Column definitions from an Arrow schema.
    pub fn columns_from(schema: &Schema) -> Vec<ColumnDef> {
        schema
            .fields()
            .iter()
            .map(|f| ColumnDef {
                name: f.name().clone(),
                data_type: f.data_type().to_string(),
                nullable: f.is_nullable(),
                default: None,
            })
            .collect()
    }

    /// PostgreSQL's name for the primary-key constraint.
    pub fn primary_key_name(&self) -> String {
        format!("{}_pkey", self.name)
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("table definitions serialise")
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self> {
        serde_json::from_slice(bytes).map_err(|e| {
            ZyronError::new(
                SqlState::DATA_CORRUPTED,
                format!("catalog: unreadable table definition: {e}"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::TimeUnit;

    #[test]
    fn types_survive_the_text_form() {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8View, true),
            Field::new("c", DataType::Decimal128(15, 2), true),
            Field::new(
                "d",
                DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
                true,
            ),
            Field::new("e", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
            Field::new("f", DataType::Date32, true),
        ]);
        let def = TableDef {
            id: 1,
            schema: DEFAULT_SCHEMA.into(),
            name: "t".into(),
            columns: TableDef::columns_from(&schema),
            primary_key: vec![0],
            checks: vec![CheckDef {
                name: "t_a_check".into(),
                sql: "a > 0".into(),
            }],
            fillfactor: Some(90),
        };
        let back = TableDef::from_json(&def.to_json()).unwrap();
        assert_eq!(back, def);
        assert_eq!(back.arrow_schema().unwrap().as_ref(), &schema);
        assert_eq!(
            TableDef::from_json(b"{").unwrap_err().sqlstate(),
            SqlState::DATA_CORRUPTED
        );
    }
}
