//! PostgreSQL type names that DataFusion's SQL planner does not know, planned
//! as the Arrow type that holds their values (DataFusion's `TypePlanner` seam).

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::Result;
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::planner::TypePlanner;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast;
use datafusion_pg_catalog::pg_catalog::oid_type_planner::PgOidTypePlanner;

/// Makes `ctx` plan these types, and the oid aliases (`regclass`, ...) that
/// `setup_pg_catalog` installed its own planner for.
pub fn install(ctx: &SessionContext) {
    let state = ctx.state_ref();
    let existing = state.read().clone();
    let planned = SessionStateBuilder::new_from_existing(existing)
        .with_type_planner(Arc::new(PostgresTypes))
        .build();
    *state.write() = planned;
}

#[derive(Debug)]
pub struct PostgresTypes;

impl TypePlanner for PostgresTypes {
    fn plan_type_field(&self, sql_type: &ast::DataType) -> Result<Option<FieldRef>> {
        match self.text_type(sql_type) {
            Some(data_type) => Ok(Some(Arc::new(Field::new("", data_type, true)))),
            None => PgOidTypePlanner.plan_type_field(sql_type),
        }
    }
}

impl PostgresTypes {
    fn text_type(&self, sql_type: &ast::DataType) -> Option<DataType> {
        let ast::DataType::Custom(name, modifiers) = sql_type else {
            return None;
        };
        if !modifiers.is_empty() {
            return None;
        }
        let last = name.0.last().and_then(|part| part.as_ident())?;
        let schema_ok = match name.0.len() {
            1 => true,
            2 => name.0[0]
                .as_ident()
                .is_some_and(|schema| schema.value.eq_ignore_ascii_case("pg_catalog")),
            _ => false,
        };
        // `name`: PostgreSQL's identifier type (at most 63 bytes), text to a client.
        (schema_ok && last.value.eq_ignore_ascii_case("name")).then_some(DataType::Utf8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn planned(type_text: &str) -> Option<DataType> {
        let sql = format!("SELECT CAST(x AS {type_text})");
        let statement = Parser::parse_sql(&PostgreSqlDialect {}, &sql)
            .unwrap()
            .remove(0);
        let mut found = None;
        let _ = ast::visit_expressions(&statement, |expr| {
            if let ast::Expr::Cast { data_type, .. } = expr {
                found = PostgresTypes
                    .plan_type_field(data_type)
                    .unwrap()
                    .map(|field| field.data_type().clone());
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
        found
    }

    #[test]
    fn name_is_text_and_other_custom_types_are_left_to_datafusion() {
        assert_eq!(planned("name"), Some(DataType::Utf8));
        assert_eq!(planned("pg_catalog.name"), Some(DataType::Utf8));
        assert_eq!(planned("point"), None);
        assert_eq!(planned("regclass"), Some(DataType::Int32));
        assert_eq!(planned("other.name"), None);
    }
}
