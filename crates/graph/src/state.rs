//! A graph's state: named channels, each with a value type and a reducer that folds a node's
//! update into it — the last value wins, items are appended, or objects are merged. Every
//! update is type-checked against the channel before it is folded, so a node cannot leave
//! the state in a shape the graph did not declare.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The state: channel name → value.
pub type State = Map<String, Value>;

/// What a node writes: channel name → value, folded by each channel's reducer.
pub type Update = Map<String, Value>;

/// The type of a channel's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ValueType {
    /// Text.
    String,
    /// Any JSON number.
    Number,
    /// A whole number.
    Integer,
    /// `true` or `false`.
    Boolean,
    /// A JSON array.
    List,
    /// A JSON object.
    Object,
    /// Any JSON value.
    Any,
}

impl ValueType {
    /// Whether `value` has this type (`null` is accepted as "not set yet").
    pub fn accepts(self, value: &Value) -> bool {
        match (self, value) {
            (_, Value::Null) | (ValueType::Any, _) => true,
            (ValueType::String, Value::String(_)) => true,
            (ValueType::Number, Value::Number(_)) => true,
            (ValueType::Integer, Value::Number(n)) => n.is_i64() || n.is_u64(),
            (ValueType::Boolean, Value::Bool(_)) => true,
            (ValueType::List, Value::Array(_)) => true,
            (ValueType::Object, Value::Object(_)) => true,
            _ => false,
        }
    }

    /// The value a channel of this type starts with.
    pub fn empty(self) -> Value {
        match self {
            ValueType::String => Value::String(String::new()),
            ValueType::List => Value::Array(Vec::new()),
            ValueType::Object => Value::Object(Map::new()),
            _ => Value::Null,
        }
    }

    /// The name used in blueprints and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ValueType::String => "string",
            ValueType::Number => "number",
            ValueType::Integer => "integer",
            ValueType::Boolean => "boolean",
            ValueType::List => "list",
            ValueType::Object => "object",
            ValueType::Any => "any",
        }
    }
}

/// The JSON type name of a value, for messages.
pub fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

/// How an update is folded into a channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Reducer {
    /// The update replaces the value.
    #[default]
    Last,
    /// The update is appended (a list update appends each of its items).
    Append,
    /// The update's keys are merged into the object (shallow).
    Merge,
}

/// One channel of the state.
#[derive(Debug, Clone, PartialEq)]
pub struct Channel {
    /// Its value type.
    pub kind: ValueType,
    /// How updates are folded.
    pub reducer: Reducer,
    /// Its value before any update (the type's empty value when `None`).
    pub default: Option<Value>,
}

impl Channel {
    /// A last-value channel of this type.
    pub fn last(kind: ValueType) -> Self {
        Self { kind, reducer: Reducer::Last, default: None }
    }

    /// An append channel (a list).
    pub fn append() -> Self {
        Self { kind: ValueType::List, reducer: Reducer::Append, default: None }
    }

    /// A merge channel (an object).
    pub fn merge() -> Self {
        Self { kind: ValueType::Object, reducer: Reducer::Merge, default: None }
    }

    /// The reducer works on the type: append needs a list, merge an object.
    pub fn check(&self) -> Result<(), String> {
        match (self.reducer, self.kind) {
            (Reducer::Append, ValueType::List | ValueType::Any) => Ok(()),
            (Reducer::Merge, ValueType::Object | ValueType::Any) => Ok(()),
            (Reducer::Last, _) => Ok(()),
            (r, k) => Err(format!("reducer `{r:?}` does not work on a {} channel", k.as_str()).to_lowercase()),
        }
    }
}

/// Why an update was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The update names a channel the graph does not have.
    #[error("no channel `{0}` in the graph's state")]
    UnknownChannel(String),
    /// The value does not fit the channel.
    #[error("channel `{channel}` holds a {expected}, but the update is a {found}: {value}")]
    WrongType {
        /// The channel.
        channel: String,
        /// Its type.
        expected: &'static str,
        /// The update's type.
        found: &'static str,
        /// The update, shortened.
        value: String,
    },
}

/// The channels of a graph's state, in name order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Schema {
    channels: BTreeMap<String, Channel>,
}

impl Schema {
    /// No channels.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a channel, builder style.
    pub fn with(mut self, name: impl Into<String>, channel: Channel) -> Self {
        self.channels.insert(name.into(), channel);
        self
    }

    /// A channel by name.
    pub fn channel(&self, name: &str) -> Option<&Channel> {
        self.channels.get(name)
    }

    /// Names and channels.
    pub fn channels(&self) -> impl Iterator<Item = (&str, &Channel)> {
        self.channels.iter().map(|(n, c)| (n.as_str(), c))
    }

    /// Every channel at its default value.
    pub fn empty_state(&self) -> State {
        self.channels.iter().map(|(n, c)| (n.clone(), c.default.clone().unwrap_or_else(|| c.kind.empty()))).collect()
    }

    /// Folds `update` into `state` channel by channel (in the update's key order). Nothing is
    /// changed when any part of the update is refused.
    pub fn apply(&self, state: &mut State, update: &Update) -> Result<(), StateError> {
        self.check(update)?;
        for (name, value) in update {
            let Some(channel) = self.channels.get(name) else { continue };
            let slot = state.entry(name.clone()).or_insert_with(|| channel.kind.empty());
            fold(channel, slot, value.clone());
        }
        Ok(())
    }

    /// Whether `update` may be folded (channels exist, values fit).
    pub fn check(&self, update: &Update) -> Result<(), StateError> {
        for (name, value) in update {
            let channel = self.channels.get(name).ok_or_else(|| StateError::UnknownChannel(name.clone()))?;
            let fits = match channel.reducer {
                Reducer::Last => channel.kind.accepts(value),
                Reducer::Append => true,
                Reducer::Merge => value.is_object() || value.is_null(),
            };
            if !fits {
                return Err(wrong_type(name, channel, value));
            }
        }
        Ok(())
    }
}

fn wrong_type(name: &str, channel: &Channel, value: &Value) -> StateError {
    let mut shown = value.to_string();
    if shown.len() > 80 {
        let cut = (0..=77).rev().find(|&i| shown.is_char_boundary(i)).unwrap_or(0);
        shown.truncate(cut);
        shown.push('…');
    }
    let expected = match channel.reducer {
        Reducer::Merge => "object",
        _ => channel.kind.as_str(),
    };
    StateError::WrongType { channel: name.to_string(), expected, found: type_of(value), value: shown }
}

fn fold(channel: &Channel, slot: &mut Value, value: Value) {
    match channel.reducer {
        Reducer::Last => *slot = value,
        Reducer::Append => {
            if !slot.is_array() {
                *slot = Value::Array(Vec::new());
            }
            if let Value::Array(items) = slot {
                match value {
                    Value::Array(more) => items.extend(more),
                    Value::Null => {}
                    one => items.push(one),
                }
            }
        }
        Reducer::Merge => {
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            if let (Value::Object(into), Value::Object(from)) = (slot, value) {
                into.extend(from);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::new()
            .with("topic", Channel::last(ValueType::String))
            .with("notes", Channel::append())
            .with("facts", Channel::merge())
            .with("count", Channel::last(ValueType::Integer))
    }

    fn update(v: Value) -> Update {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn reducers_replace_append_and_merge() {
        let s = schema();
        let mut state = s.empty_state();
        s.apply(&mut state, &update(json!({"topic": "a", "notes": "one", "facts": {"x": 1}}))).unwrap();
        s.apply(&mut state, &update(json!({"topic": "b", "notes": ["two", "three"], "facts": {"y": 2}}))).unwrap();
        assert_eq!(state["topic"], "b");
        assert_eq!(state["notes"], json!(["one", "two", "three"]));
        assert_eq!(state["facts"], json!({"x": 1, "y": 2}));
    }

    #[test]
    fn a_wrong_type_is_refused_and_changes_nothing() {
        let s = schema();
        let mut state = s.empty_state();
        let before = state.clone();
        let err = s.apply(&mut state, &update(json!({"topic": "fine", "count": "three"}))).unwrap_err();
        assert!(matches!(err, StateError::WrongType { ref channel, .. } if channel == "count"), "{err}");
        assert_eq!(state, before);
        let err = s.apply(&mut state, &update(json!({"count": 2.5}))).unwrap_err();
        assert!(err.to_string().contains("integer"), "{err}");
    }

    #[test]
    fn an_unknown_channel_is_refused() {
        let s = schema();
        let mut state = s.empty_state();
        assert_eq!(
            s.apply(&mut state, &update(json!({"topics": "x"}))),
            Err(StateError::UnknownChannel("topics".into()))
        );
    }

    #[test]
    fn reducers_need_fitting_types() {
        assert!(Channel { kind: ValueType::String, reducer: Reducer::Append, default: None }.check().is_err());
        assert!(Channel { kind: ValueType::List, reducer: Reducer::Merge, default: None }.check().is_err());
        assert!(Channel::append().check().is_ok());
    }
}
