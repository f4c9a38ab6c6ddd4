//! Bind parameters of the commonest kind, integers sent as text, decoded
//! without `arrow-pg`'s general decoder.
//!
//! That decoder asks `pgwire` for each value, and `pgwire` builds a default
//! `FormatOptions` (four `String`s) per text parameter: under pgbench's
//! TPC-B those were a tenth of the server's allocations. The fast path here
//! gives exactly the values the general decoder gives (a test compares the
//! two), and hands anything else back to it, errors included.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{ParamValues, ScalarValue};
use pgwire::api::Type;
use pgwire::api::portal::Portal;

/// The portal's parameters if every one is an integer parameter sent as
/// text (or NULL) that fits its types; `None` sends the portal to the
/// general decoder.
pub fn integers_as_text<S: Clone>(
    portal: &Portal<S>,
    inferred: &[Option<DataType>],
) -> Option<ParamValues> {
    let count = portal.parameter_len();
    let mut values = Vec::with_capacity(count);
    for index in 0..count {
        if portal.parameter_format.is_binary(index) {
            return None;
        }
        let target = inferred.get(index)?.as_ref()?;
        let client_type = portal
            .statement
            .parameter_types
            .get(index)
            .cloned()
            .flatten();
        // The width the general decoder parses with: the client's declared
        // type, else the one the inferred type maps to.
        let wire_bits = match client_type {
            None => integer_bits(target)?,
            Some(Type::INT2) => 16,
            Some(Type::INT4) => 32,
            Some(Type::INT8) => 64,
            Some(_) => return None,
        };
        let value = match &portal.parameters[index] {
            None => None,
            Some(text) => {
                let value: i64 = std::str::from_utf8(text).ok()?.parse().ok()?;
                if !fits(value, wire_bits) {
                    return None;
                }
                Some(value)
            }
        };
        values.push(integer_scalar(value, target)?);
    }
    Some(ParamValues::List(
        values.into_iter().map(Into::into).collect(),
    ))
}

/// The width of the integer types this path decodes into.
fn integer_bits(data_type: &DataType) -> Option<u32> {
    match data_type {
        DataType::Int16 => Some(16),
        DataType::Int32 => Some(32),
        DataType::Int64 => Some(64),
        _ => None,
    }
}

fn fits(value: i64, bits: u32) -> bool {
    match bits {
        16 => i16::try_from(value).is_ok(),
        32 => i32::try_from(value).is_ok(),
        _ => true,
    }
}

/// `value` as a scalar of `target`; `None` if it does not fit.
fn integer_scalar(value: Option<i64>, target: &DataType) -> Option<ScalarValue> {
    let bits = integer_bits(target)?;
    if value.is_some_and(|v| !fits(v, bits)) {
        return None;
    }
    Some(match target {
        DataType::Int16 => ScalarValue::Int16(value.map(|v| v as i16)),
        DataType::Int32 => ScalarValue::Int32(value.map(|v| v as i32)),
        DataType::Int64 => ScalarValue::Int64(value),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use pgwire::api::stmt::StoredStatement;
    use pgwire::messages::extendedquery::Bind;

    use super::*;

    fn portal(
        client_types: &[Option<Type>],
        formats: &[i16],
        values: &[Option<&str>],
    ) -> Portal<()> {
        let statement = StoredStatement::new(String::new(), (), client_types.to_vec());
        let bind = Bind::new(
            None,
            None,
            formats.to_vec(),
            values
                .iter()
                .map(|v| v.map(|text| Bytes::copy_from_slice(text.as_bytes())))
                .collect(),
            Vec::new(),
        );
        Portal::try_new(&bind, Arc::new(statement)).expect("a portal")
    }

    fn general(portal: &Portal<()>, inferred: &[Option<DataType>]) -> Option<Vec<ScalarValue>> {
        let refs: Vec<Option<&DataType>> = inferred.iter().map(Option::as_ref).collect();
        let values = arrow_pg::datatypes::df::deserialize_parameters(portal, &refs).ok()?;
        Some(scalars(values))
    }

    /// The values of positional parameters (none carries metadata).
    fn scalars(values: ParamValues) -> Vec<ScalarValue> {
        let ParamValues::List(values) = values else {
            panic!("positional parameters")
        };
        values
            .into_iter()
            .map(|v| {
                assert!(v.metadata.is_none(), "{v:?} has no metadata");
                v.value
            })
            .collect()
    }

    /// Wherever the fast path answers, the general decoder answers the same.
    #[test]
    fn the_fast_path_agrees_with_the_general_decoder() {
        let texts = [
            Some("0"),
            Some("-1"),
            Some("+7"),
            Some("32767"),
            Some("32768"),
            Some("-2147483648"),
            Some("2147483648"),
            Some("9223372036854775807"),
            Some("9223372036854775808"),
            Some(" 5"),
            Some("5.0"),
            Some("abc"),
            Some(""),
            None,
        ];
        let targets = [
            Some(DataType::Int16),
            Some(DataType::Int32),
            Some(DataType::Int64),
            Some(DataType::Utf8),
            None,
        ];
        let client_types = [
            None,
            Some(Type::INT2),
            Some(Type::INT4),
            Some(Type::INT8),
            Some(Type::TEXT),
        ];
        let mut fast_answers = 0;
        for text in texts {
            for target in &targets {
                for client_type in &client_types {
                    let inferred = [target.clone()];
                    let portal = portal(&[client_type.clone()], &[], &[text]);
                    let Some(fast) = integers_as_text(&portal, &inferred) else {
                        continue;
                    };
                    fast_answers += 1;
                    let case = format!("{text:?} as {target:?}, client type {client_type:?}");
                    assert_eq!(Some(scalars(fast)), general(&portal, &inferred), "{case}");
                }
            }
        }
        assert!(
            fast_answers >= 20,
            "the fast path answered only {fast_answers} cases"
        );
    }

    /// pgbench's shape: untyped text parameters into INTEGER columns.
    #[test]
    fn untyped_integer_parameters_take_the_fast_path() {
        let inferred = [
            Some(DataType::Int32),
            Some(DataType::Int64),
            Some(DataType::Int32),
        ];
        let portal = portal(&[], &[], &[Some("-4321"), Some("12"), None]);
        let values = integers_as_text(&portal, &inferred).expect("the fast path");
        assert_eq!(
            scalars(values),
            vec![
                ScalarValue::Int32(Some(-4321)),
                ScalarValue::Int64(Some(12)),
                ScalarValue::Int32(None),
            ]
        );
    }

    #[test]
    fn binary_and_unparsable_parameters_go_to_the_general_decoder() {
        let inferred = [Some(DataType::Int32)];
        let binary = portal(&[], &[1], &[Some("\0\0\0\x05")]);
        assert!(integers_as_text(&binary, &inferred).is_none());
        let words = portal(&[], &[], &[Some("five")]);
        assert!(integers_as_text(&words, &inferred).is_none());
        assert!(
            general(&words, &inferred).is_none(),
            "the general decoder reports the error"
        );
    }
}
