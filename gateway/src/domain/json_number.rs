//! JSON numbers as JSON Schema reads them: `5.0` and `1e3` are integers (a number with
//! a zero fractional part is one, however it is written), while serde refuses them for
//! an integer field. Request documents are passed through [`integral_numbers`] before
//! they are deserialized, so a document the published schema accepts is never refused
//! for the way a client's JSON library writes a whole number.

use serde::de::DeserializeOwned;
use serde_json::{Number, Value};

/// Rewrites every number of `v` that is a whole number within `i64`/`u64` as an
/// integer (nesting is bounded by the parser that made `v`).
pub fn integral_numbers(v: &mut Value) {
    match v {
        Value::Number(n) => {
            if let Some(whole) = whole_number(n) {
                *n = whole;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_numbers),
        Value::Object(map) => map.values_mut().for_each(integral_numbers),
        _ => {}
    }
}

#[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
fn whole_number(n: &Number) -> Option<Number> {
    if n.is_i64() || n.is_u64() {
        return None;
    }
    let f = n.as_f64()?;
    if !f.is_finite() || f.fract() != 0.0 {
        return None;
    }
    // `as` saturates; the bounds keep only values that convert exactly.
    if f >= 0.0 && f < u64::MAX as f64 {
        Some(Number::from(f as u64))
    } else if f < 0.0 && f >= i64::MIN as f64 {
        Some(Number::from(f as i64))
    } else {
        None
    }
}

/// A JSON document deserialized after [`integral_numbers`].
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    let mut v: Value = serde_json::from_slice(bytes)?;
    integral_numbers(&mut v);
    serde_json::from_value(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn whole_numbers_become_integers_and_nothing_else_changes() {
        let mut v: Value = serde_json::from_str(
            r#"{"a": 5.0, "b": [1e3, -2.0, 2.5], "c": 7, "d": 1e300, "e": "5.0"}"#,
        )
        .expect("json");
        integral_numbers(&mut v);
        assert_eq!(
            v,
            json!({"a": 5, "b": [1000, -2, 2.5], "c": 7, "d": 1e300, "e": "5.0"})
        );

        #[derive(serde::Deserialize)]
        struct S {
            n: u32,
        }
        assert_eq!(from_slice::<S>(br#"{"n": 8.0}"#).expect("whole").n, 8);
        assert!(from_slice::<S>(br#"{"n": 8.5}"#).is_err());
        assert!(from_slice::<S>(br#"{"n": -1.0}"#).is_err());
    }
}
