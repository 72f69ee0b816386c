//! The format version every record the store keeps carries (contract 10: a reader knows which
//! shape it reads). A record's JSON body gets a `version` field when it is written; reading
//! checks it first: a record without one was written before records were versioned (format 0,
//! the shape of format 1 without the field) and reads as it is; a record newer than this build
//! understands is refused with a clear error instead of being misread. Owners of records the
//! store keeps opaque (a served run's body) encode and decode them here too.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::checkpoint::StoreError;

/// The format version of the records this build writes.
pub const FORMAT: u32 = 1;

/// A record as written: its version first, then its own fields.
#[derive(Serialize)]
struct Versioned<'a, T> {
    version: u32,
    #[serde(flatten)]
    record: &'a T,
}

/// The version of a stored record (0 when it has none).
#[derive(Deserialize)]
struct Version {
    #[serde(default)]
    version: u32,
}

/// A record's body with the current format version.
pub fn encode<T: Serialize>(record: &T) -> Result<String, StoreError> {
    Ok(serde_json::to_string(&Versioned { version: FORMAT, record })?)
}

/// Reads a record's body of any version this build understands.
pub fn decode<T: DeserializeOwned>(body: &str) -> Result<T, StoreError> {
    let Version { version } = serde_json::from_str(body)?;
    match version {
        // Format 0 is format 1 without the field: the same reader takes both.
        0 | FORMAT => Ok(serde_json::from_str(body)?),
        found => Err(StoreError::NewerFormat { found, supported: FORMAT }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Record {
        name: String,
    }

    #[test]
    fn a_written_record_carries_the_current_version_and_reads_back() {
        let body = encode(&Record { name: "a".into() }).unwrap();
        let raw: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(raw["version"], json!(FORMAT));
        assert_eq!(decode::<Record>(&body).unwrap(), Record { name: "a".into() });
    }

    #[test]
    fn a_record_without_a_version_reads_as_format_zero() {
        assert_eq!(decode::<Record>(r#"{"name":"old"}"#).unwrap(), Record { name: "old".into() });
    }

    #[test]
    fn a_record_of_a_newer_format_is_refused_not_misread() {
        let err = decode::<Record>(r#"{"version":99,"name":"new"}"#).unwrap_err();
        assert!(matches!(err, StoreError::NewerFormat { found: 99, supported: FORMAT }), "{err}");
        assert!(err.to_string().contains("format version 99"), "{err}");
    }
}
