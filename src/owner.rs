//! The owner record `owner.json`: what a lock says about its holder. Pure: parsing and
//! serializing only (the checks on the file itself are in [`crate::protocol`]).

use crate::paths::OWNER_LIMIT;
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The owner record of a lock, as stored in its `owner.json`.
///
/// `pid` and `token` are the only required fields: that is all the reference implementation
/// writes, and such a record is judged by its pid alone. This crate also records the facts
/// that let an owner be judged without guessing (start time, boot id, host, pid namespace,
/// beacon) and some for people (acquisition time, purpose, writer). Unknown fields are
/// ignored; a known field of the wrong type makes the record malformed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Owner {
    /// Process id of the holder.
    pub pid: u32,
    /// The holder's secret for this acquisition (a UUID v4).
    pub token: String,
    /// Start time of the holder process, in clock ticks since boot (Linux `/proc/<pid>/stat`
    /// field 22): tells a reused pid from the holder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    /// The kernel's boot id when the lock was taken: a record from a previous boot is dead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// Host name of the holder: pids on another host mean nothing here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Pid namespace of the holder (`/proc/self/ns/pid` link target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_namespace: Option<String>,
    /// When the lock was taken, in milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquired_unix_ms: Option<u64>,
    /// Whether the holder keeps an exclusive `flock` on the lock directory for the lock's whole
    /// life: if it does, a lock nobody holds the `flock` on is proven dead by the kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beacon: Option<bool>,
    /// What the holder is doing, as its caller said (e.g. `"sync"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// What wrote the record (e.g. `"dirlock 0.1.0"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer: Option<String>,
    /// The operating system of the holder (`"linux"`, `"macos"`, `"freebsd"`, `"windows"`):
    /// its beacon and pid can be tested only by a process of the same one. Two can share a
    /// directory on one machine (a Windows program under Wine beside Linux ones, Windows
    /// beside WSL) and see nothing of each other's locks and processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    /// Whether the lock is shared: held by readers, each with an entry of its own inside the
    /// lock, each holding a shared `flock` on the lock directory while it reads. The record
    /// then names one live reader (for programs that know only exclusive locks, which judge
    /// it by its pid), and no reader holding that `flock` proves them all gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<bool>,
}

impl Owner {
    /// A minimal record, as the reference implementation writes it.
    pub fn new(pid: u32, token: impl Into<String>) -> Owner {
        Owner {
            pid,
            token: token.into(),
            start_time: None,
            boot_id: None,
            host: None,
            pid_namespace: None,
            acquired_unix_ms: None,
            beacon: None,
            purpose: None,
            writer: None,
            os: None,
            shared: None,
        }
    }

    /// When the lock was taken, if recorded (and within what the system's clock can count: the
    /// field is read from disk, and may say anything).
    pub fn acquired_at(&self) -> Option<SystemTime> {
        self.acquired_unix_ms
            .and_then(|ms| UNIX_EPOCH.checked_add(Duration::from_millis(ms)))
    }

    /// Whether the record says the holder keeps a beacon `flock`: an exclusive one, or, for
    /// a shared lock, its readers' shared ones.
    pub fn has_beacon(&self) -> bool {
        self.beacon == Some(true) || self.is_shared()
    }

    /// Whether the record is a shared lock's (see [`Owner::shared`]).
    pub fn is_shared(&self) -> bool {
        self.shared == Some(true)
    }

    /// Parses a record.
    ///
    /// # Errors
    ///
    /// What is wrong, when `bytes` is not one JSON object of at most 4 KiB with a `pid` in
    /// `1..=i32::MAX` and a non-empty `token`, or when a known field has the wrong type.
    pub fn parse(bytes: &[u8]) -> Result<Owner, RecordError> {
        if bytes.is_empty() {
            return Err(RecordError::Empty);
        }
        if bytes.len() > OWNER_LIMIT {
            return Err(RecordError::TooLarge {
                size: bytes.len(),
                limit: OWNER_LIMIT,
            });
        }
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| RecordError::NotJson(e.to_string()))?;
        if !value.is_object() {
            return Err(RecordError::NotObject);
        }
        let owner = Owner::deserialize(value).map_err(|e| RecordError::Invalid(e.to_string()))?;
        if owner.pid == 0 || owner.pid > i32::MAX as u32 {
            return Err(RecordError::NotAPid(owner.pid));
        }
        if owner.token.is_empty() {
            return Err(RecordError::EmptyToken);
        }
        Ok(owner)
    }

    /// Serializes the record (compact JSON, as the reference writes it).
    ///
    /// # Errors
    ///
    /// [`RecordError::TooLarge`] when the record would be larger than 4 KiB (a very long
    /// purpose, say).
    pub fn to_bytes(&self) -> Result<Vec<u8>, RecordError> {
        let bytes = serde_json::to_vec(self).map_err(|e| RecordError::Invalid(e.to_string()))?;
        if bytes.len() > OWNER_LIMIT {
            return Err(RecordError::TooLarge {
                size: bytes.len(),
                limit: OWNER_LIMIT,
            });
        }
        Ok(bytes)
    }
}

/// Why bytes are not an owner record ([`Owner::parse`], [`Owner::to_bytes`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// There are no bytes.
    #[error("the record is empty")]
    Empty,
    /// More bytes than a record may have.
    #[error("the record is {size} bytes, more than the {limit} a record may have")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The most a record may have.
        limit: usize,
    },
    /// Not JSON (the parser's message).
    #[error("the record is not JSON: {0}")]
    NotJson(String),
    /// JSON, but not an object.
    #[error("the record is not a JSON object")]
    NotObject,
    /// A field is missing or of the wrong type (the parser's message).
    #[error("the record is invalid: {0}")]
    Invalid(String),
    /// The pid is 0 or above the largest process id.
    #[error("the record's pid {0} is not a process id")]
    NotAPid(u32),
    /// The token is empty.
    #[error("the record's token is empty")]
    EmptyToken,
}

/// `pid 42 on host h (purpose: sync)`: the one way an owner is put into words. The host and
/// purpose come from disk, so control characters in them are escaped.
impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {}", self.pid)?;
        if let Some(h) = &self.host {
            write!(f, " on host {}", crate::text::escape(h))?;
        }
        if let Some(p) = &self.purpose {
            write!(f, " (purpose: {})", crate::text::escape(p))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_records_parse() {
        let o =
            Owner::parse(br#"{"pid":123,"token":"8a1c0f2e-1b7e-4a57-9a43-2b6d7c2b9f10"}"#).unwrap();
        assert_eq!(o.pid, 123);
        assert_eq!(o.token, "8a1c0f2e-1b7e-4a57-9a43-2b6d7c2b9f10");
        assert_eq!(o.start_time, None);
        assert!(!o.has_beacon());
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let o = Owner::parse(br#"{"pid":1,"token":"t","future":{"x":[1,2]}}"#).unwrap();
        assert_eq!(o, Owner::new(1, "t"));
    }

    #[test]
    fn full_records_round_trip() {
        let mut o = Owner::new(77, "tok");
        o.start_time = Some(12345);
        o.boot_id = Some("b".into());
        o.host = Some("h".into());
        o.pid_namespace = Some("pid:[4026531836]".into());
        o.acquired_unix_ms = Some(1_700_000_000_000);
        o.beacon = Some(true);
        o.purpose = Some("sync \"quoted\" \u{e9}".into());
        o.writer = Some("dirlock 0.1.0".into());
        let bytes = o.to_bytes().unwrap();
        assert_eq!(Owner::parse(&bytes).unwrap(), o);
    }

    #[test]
    fn malformed_records_are_refused() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "empty"),
            (b"{", "not JSON"),
            (b"[1,\"t\"]", "not a JSON object"),
            (b"null", "not a JSON object"),
            (br#"{"token":"t"}"#, "pid"),
            (br#"{"pid":1}"#, "token"),
            (br#"{"pid":0,"token":"t"}"#, "not a process id"),
            (br#"{"pid":-4,"token":"t"}"#, "invalid"),
            (br#"{"pid":1.5,"token":"t"}"#, "invalid"),
            (br#"{"pid":"1","token":"t"}"#, "invalid"),
            (br#"{"pid":4294967296,"token":"t"}"#, "invalid"),
            (br#"{"pid":2147483648,"token":"t"}"#, "not a process id"),
            (br#"{"pid":1,"token":""}"#, "empty"),
            (br#"{"pid":1,"token":7}"#, "invalid"),
            (br#"{"pid":1,"token":"t","beacon":"yes"}"#, "invalid"),
            (br#"{"pid":1,"token":"t","start_time":-1}"#, "invalid"),
            (br#"{"pid":1,"token":"t","host":5}"#, "invalid"),
            (b"\xff\xfe", "not JSON"),
        ];
        for (bytes, why) in cases {
            let err = Owner::parse(bytes).unwrap_err().to_string();
            assert!(
                err.contains(why),
                "{:?}: expected {why:?} in {err:?}",
                String::from_utf8_lossy(bytes)
            );
        }
        let big = format!(r#"{{"pid":1,"token":"{}"}}"#, "a".repeat(OWNER_LIMIT));
        assert!(matches!(
            Owner::parse(big.as_bytes()).unwrap_err(),
            RecordError::TooLarge {
                limit: OWNER_LIMIT,
                ..
            }
        ));
    }

    proptest::proptest! {
        /// The stable mirror of the `owner_record` fuzz target.
        #[test]
        fn arbitrary_bytes_never_panic_and_accepted_records_round_trip(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..5000)) {
            if let Ok(owner) = Owner::parse(&data) {
                proptest::prop_assert!(data.len() <= OWNER_LIMIT);
                if let Ok(bytes) = owner.to_bytes() {
                    proptest::prop_assert_eq!(Owner::parse(&bytes).unwrap(), owner);
                }
            }
        }

        /// Every record we can write parses back to itself.
        #[test]
        fn written_records_round_trip(
            pid in 1u32..=i32::MAX as u32,
            token in "[a-z0-9-]{1,40}",
            start in proptest::option::of(proptest::prelude::any::<u64>()),
            text in proptest::option::of(".{0,200}"),
            beacon in proptest::option::of(proptest::prelude::any::<bool>()),
            ms in proptest::option::of(proptest::prelude::any::<u64>()),
        ) {
            let mut o = Owner::new(pid, token);
            o.start_time = start;
            o.boot_id = text.clone();
            o.host = text.clone();
            o.pid_namespace = text.clone();
            o.purpose = text;
            o.beacon = beacon;
            o.acquired_unix_ms = ms;
            let bytes = o.to_bytes().unwrap();
            proptest::prop_assert_eq!(Owner::parse(&bytes).unwrap(), o);
        }

        /// JSON objects with wrong-typed known fields are malformed, never accepted.
        #[test]
        fn wrong_types_are_malformed(field in "(pid|token|start_time|boot_id|host|pid_namespace|acquired_unix_ms|beacon|purpose|writer|os)") {
            let mut v = serde_json::json!({"pid": 1, "token": "t"});
            v[&field] = serde_json::json!([1, 2]);
            proptest::prop_assert!(Owner::parse(v.to_string().as_bytes()).is_err());
        }
    }

    /// A time read from disk may be beyond what the clock counts (Windows' counts fewer than
    /// 2^64 milliseconds): not a panic, but no time, or a time that far ahead.
    #[test]
    fn an_acquisition_time_beyond_the_clock_is_no_panic() {
        let mut o = Owner::new(1, "t");
        o.acquired_unix_ms = Some(u64::MAX);
        let far = UNIX_EPOCH + Duration::from_secs(1 << 34); // 2514
        assert!(o.acquired_at().is_none_or(|t| t > far));
        o.acquired_unix_ms = Some(1_000);
        assert_eq!(o.acquired_at(), Some(UNIX_EPOCH + Duration::from_secs(1)));
    }

    #[test]
    fn oversized_records_are_not_written() {
        let mut o = Owner::new(1, "t");
        o.purpose = Some("p".repeat(OWNER_LIMIT));
        assert!(matches!(
            o.to_bytes().unwrap_err(),
            RecordError::TooLarge {
                limit: OWNER_LIMIT,
                ..
            }
        ));
    }
}
