//! Conversions between JSON values and Monty's Python objects, and the text form of a
//! Python value used as a prompt.

use monty_types::{MontyObject, ObjectRef};
use serde_json::{Map, Number, Value};

/// A JSON value as a Python object (`null` → `None`, objects → `dict` in key order).
pub fn json_to_monty(v: &Value) -> MontyObject {
    match v {
        Value::Null => MontyObject::none(),
        Value::Bool(b) => MontyObject::bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => MontyObject::int(i),
            None => match n.as_u64() {
                Some(u) => MontyObject::bigint(u.into()),
                None => MontyObject::float(n.as_f64().unwrap_or(f64::NAN)),
            },
        },
        Value::String(s) => MontyObject::string(s.as_str()),
        Value::Array(a) => MontyObject::list(a.iter().map(json_to_monty)),
        Value::Object(o) => {
            MontyObject::dict(o.iter().map(|(k, v)| (MontyObject::string(k.as_str()), json_to_monty(v))))
        }
    }
}

/// Containers nested deeper than this become their `repr()` string in JSON.
pub const MAX_JSON_DEPTH: usize = 128;

/// A Python object as JSON: tuples and sets become arrays, non-string dict keys their
/// `str()`, non-finite floats `null`, anything without a JSON form (or nested deeper than
/// [`MAX_JSON_DEPTH`]) its `repr()` as a string.
pub fn monty_to_json(o: &MontyObject) -> Value {
    to_json(o.as_ref(), 0)
}

fn to_json(o: ObjectRef<'_>, depth: usize) -> Value {
    let nested = |items_or_pairs: bool| items_or_pairs && depth >= MAX_JSON_DEPTH;
    match o.type_name() {
        "NoneType" => return Value::Null,
        "bool" => return o.as_bool().map(Value::Bool).unwrap_or(Value::Null),
        "int" => {
            return match o.as_int() {
                Some(i) => Value::Number(i.into()),
                None => {
                    let text = o.to_string();
                    text.parse::<u64>().map(|u| Value::Number(u.into())).unwrap_or(Value::String(text))
                }
            };
        }
        "float" => return o.as_float().and_then(Number::from_f64).map(Value::Number).unwrap_or(Value::Null),
        "str" => return Value::String(o.as_str().unwrap_or_default().to_string()),
        "dict" => {
            let Some(pairs) = o.pairs() else { return Value::String(o.py_repr()) };
            if nested(true) {
                return Value::String(o.py_repr());
            }
            let mut m = Map::new();
            for (k, v) in pairs {
                let key = k.as_str().map(str::to_string).unwrap_or_else(|| k.to_string());
                m.insert(key, to_json(v, depth + 1));
            }
            return Value::Object(m);
        }
        _ => {}
    }
    if let Some(items) = o.items() {
        if nested(true) {
            return Value::String(o.py_repr());
        }
        return Value::Array(items.into_iter().map(|v| to_json(v, depth + 1)).collect());
    }
    if let Some(d) = o.as_decimal() {
        return Value::String(d.to_string());
    }
    Value::String(o.to_string())
}

/// The text of a value passed as a prompt: a `str` as is, anything else its `str()`.
pub fn prompt_text(o: &MontyObject) -> String {
    match o.as_ref().as_str() {
        Some(s) => s.to_string(),
        None => o.to_string(),
    }
}

/// The prompt text of each item of a list or tuple (a `str` as is, anything else its `str()`),
/// copied once.
pub fn prompt_texts(o: &MontyObject) -> Option<Vec<String>> {
    o.as_ref()
        .items()
        .map(|items| items.iter().map(|i| i.as_str().map(str::to_string).unwrap_or_else(|| i.to_string())).collect())
}

/// The items of a list or tuple (or set), if the value is one.
pub fn sequence_items(o: &MontyObject) -> Option<Vec<MontyObject>> {
    o.as_ref().items().map(|items| items.into_iter().map(|i| i.to_owned()).collect())
}

/// The `(key, value)` pairs of a dict, if the value is one.
pub fn dict_pairs(o: &MontyObject) -> Option<Vec<(MontyObject, MontyObject)>> {
    if o.type_name() != "dict" {
        return None;
    }
    o.as_ref().pairs().map(|pairs| pairs.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect())
}

/// Whether the value is Python's `None`.
pub fn is_none(o: &MontyObject) -> bool {
    o.type_name() == "NoneType"
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
        let o = MontyObject::dict([(
            MontyObject::int(1),
            MontyObject::tuple([MontyObject::int(2), MontyObject::float(f64::NAN)]),
        )]);
        assert_eq!(monty_to_json(&o), json!({"1": [2, null]}));
    }

    #[test]
    fn deep_nesting_is_cut_to_a_repr_string() {
        let mut o = MontyObject::int(1);
        for _ in 0..MAX_JSON_DEPTH + 5 {
            o = MontyObject::list([o]);
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
        assert_eq!(prompt_text(&MontyObject::string("hi")), "hi");
        assert_eq!(prompt_text(&MontyObject::int(7)), "7");
    }

    #[test]
    fn big_integers_keep_their_digits() {
        assert_eq!(monty_to_json(&json_to_monty(&json!(u64::MAX))), json!(u64::MAX));
    }
}
