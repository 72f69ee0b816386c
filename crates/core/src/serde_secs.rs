//! Serde helpers writing a `Duration` as a number of seconds (fractions allowed), for
//! configuration files: `#[serde(with = "recursive_core::serde_secs")]`.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Writes the duration as seconds.
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Reads seconds; negative, infinite or NaN values are an error.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let secs = f64::deserialize(d)?;
    Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
}

/// The same for `Option<Duration>` (`None` is written as null):
/// `#[serde(with = "recursive_core::serde_secs::option")]`.
pub mod option {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the duration as seconds, or null.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    /// Reads seconds or null; negative, infinite or NaN values are an error.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Option::<f64>::deserialize(d)? {
            Some(secs) => Duration::try_from_secs_f64(secs).map(Some).map_err(serde::de::Error::custom),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};
    use std::time::Duration;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct T {
        #[serde(with = "super")]
        d: Duration,
    }

    #[test]
    fn seconds_round_trip_and_negative_is_refused() {
        let t: T = serde_json::from_str(r#"{"d": 1.5}"#).unwrap();
        assert_eq!(t.d, Duration::from_millis(1500));
        assert_eq!(serde_json::to_string(&t).unwrap(), r#"{"d":1.5}"#);
        assert!(serde_json::from_str::<T>(r#"{"d": -1}"#).is_err());
    }
}
