//! Conversions between JSON values and Monty's Python objects, and the text form of a
//! Python value used as a prompt.

use monty_types::MontyObject;
use serde_json::{Map, Number, Value};

/// A JSON value as a Python object (`null` → `None`, objects → `dict` in key order).
pub fn json_to_monty(v: &Value) -> MontyObject {
    match v {
        Value::Null => MontyObject::None,
        Value::Bool(b) => MontyObject::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => MontyObject::Int(i),
            None => match n.as_u64() {
                Some(u) => MontyObject::BigInt(u.into()),
                None => MontyObject::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
        },
        Value::String(s) => MontyObject::String(s.clone()),
        Value::Array(a) => MontyObject::List(a.iter().map(json_to_monty).collect()),
        Value::Object(o) => MontyObject::dict(
            o.iter().map(|(k, v)| (MontyObject::String(k.clone()), json_to_monty(v))).collect::<Vec<_>>(),
        ),
    }
}

/// Containers nested deeper than this become their `repr()` string in JSON.
pub const MAX_JSON_DEPTH: usize = 128;

/// A Python object as JSON: tuples and sets become arrays, non-string dict keys their
/// `str()`, non-finite floats `null`, anything without a JSON form (or nested deeper than
/// [`MAX_JSON_DEPTH`]) its `repr()` as a string.
pub fn monty_to_json(o: &MontyObject) -> Value {
    to_json(o, 0)
}

fn to_json(o: &MontyObject, depth: usize) -> Value {
    let nested = matches!(
        o,
        MontyObject::List(_)
            | MontyObject::Tuple(_)
            | MontyObject::Set(_)
            | MontyObject::FrozenSet(_)
            | MontyObject::NamedTuple { .. }
            | MontyObject::Dict(_)
    );
    if nested && depth >= MAX_JSON_DEPTH {
        return Value::String(o.py_repr());
    }
    let monty_to_json = |v: &MontyObject| to_json(v, depth + 1);
    match o {
        MontyObject::None => Value::Null,
        MontyObject::Bool(b) => Value::Bool(*b),
        MontyObject::Int(i) => Value::Number((*i).into()),
        MontyObject::BigInt(b) => match b.to_string().parse::<u64>() {
            Ok(u) => Value::Number(u.into()),
            Err(_) => Value::String(b.to_string()),
        },
        MontyObject::Float(f) => Number::from_f64(*f).map(Value::Number).unwrap_or(Value::Null),
        MontyObject::String(s) => Value::String(s.clone()),
        MontyObject::Bytes(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
        MontyObject::List(v) | MontyObject::Tuple(v) | MontyObject::Set(v) | MontyObject::FrozenSet(v) => {
            Value::Array(v.iter().map(monty_to_json).collect())
        }
        MontyObject::NamedTuple { field_names, values, .. } => {
            let mut m = Map::new();
            for (k, v) in field_names.iter().zip(values) {
                m.insert(k.clone(), monty_to_json(v));
            }
            Value::Object(m)
        }
        MontyObject::Dict(pairs) => {
            let mut m = Map::new();
            for (k, v) in pairs {
                let key = match k {
                    MontyObject::String(s) => s.clone(),
                    other => other.to_string(),
                };
                m.insert(key, monty_to_json(v));
            }
            Value::Object(m)
        }
        MontyObject::Path(p) => Value::String(p.clone()),
        other => Value::String(other.py_repr()),
    }
}

/// The text of a value passed as a prompt: a `str` as is, anything else its `str()`.
pub fn prompt_text(o: &MontyObject) -> String {
    match o {
        MontyObject::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The Python type name of a JSON value, as the sandbox will see it.
pub fn python_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_round_trips_through_python_objects() {
        let v = json!({"a": [1, 2.5, null, true, "x"], "b": {"c": -3}});
        assert_eq!(monty_to_json(&json_to_monty(&v)), v);
    }

    #[test]
    fn tuples_become_arrays_and_int_keys_strings() {
        let o = MontyObject::dict(vec![(
            MontyObject::Int(1),
            MontyObject::Tuple(vec![MontyObject::Int(2), MontyObject::Float(f64::NAN)]),
        )]);
        assert_eq!(monty_to_json(&o), json!({"1": [2, null]}));
    }

    #[test]
    fn deep_nesting_is_cut_to_a_repr_string() {
        let mut o = MontyObject::Int(1);
        for _ in 0..MAX_JSON_DEPTH + 5 {
            o = MontyObject::List(vec![o]);
        }
        let mut v = &monty_to_json(&o);
        let mut depth = 0;
        while let Value::Array(a) = v {
            v = &a[0];
            depth += 1;
        }
        assert_eq!(depth, MAX_JSON_DEPTH);
        assert!(v.as_str().is_some_and(|s| s.starts_with("[[")), "{v}");
    }

    #[test]
    fn prompt_text_uses_str_for_non_strings() {
        assert_eq!(prompt_text(&MontyObject::String("hi".into())), "hi");
        assert_eq!(prompt_text(&MontyObject::Int(7)), "7");
    }
}
