//! Target `resources`: every line is a resource name as raw bytes (the way C passes them) and,
//! when it reads as a number, a duration for the float converters; the first 8 bytes are also
//! taken as the bits of an f64 (NaN payloads, subnormals, infinities).
//! Properties: nothing panics; `resource_from_bytes` accepts exactly UTF-8 and names the index;
//! `validate_resources` accepts exactly non-empty lists of distinct non-empty names that do not
//! end in a reserved suffix, and names the first offending index; the duration converters accept exactly what they document and
//! round-trip it.

use std::time::Duration;

use ironlock::{
    ErrorKind, duration_from_millis_f64, duration_from_secs_f64, resource_from_bytes,
    validate_resources,
};

use crate::text::float;

/// 2^64: the first f64 past the largest `Duration` in seconds and past `u64::MAX` milliseconds.
const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;

/// The properties, for one input.
pub fn check(data: &[u8]) {
    let raw: Vec<&[u8]> = if data.is_empty() {
        Vec::new()
    } else {
        data.split(|&b| b == b'\n').collect()
    };
    let mut names = Vec::with_capacity(raw.len());
    for (i, bytes) in raw.iter().enumerate() {
        match resource_from_bytes(i, bytes) {
            Ok(name) => {
                assert_eq!(
                    name.as_bytes(),
                    *bytes,
                    "resource_from_bytes changed the name"
                );
                names.push(name);
            }
            Err(e) => {
                assert!(
                    std::str::from_utf8(bytes).is_err(),
                    "valid UTF-8 rejected: {e}"
                );
                assert_eq!(e.kind(), ErrorKind::InvalidArgument);
                assert_eq!(e.message(), format!("resources[{i}]: not valid UTF-8"));
            }
        }
    }
    if names.len() == raw.len() {
        resource_list(&names);
    }
    for line in &raw {
        if let Some(x) = float(line) {
            durations(x);
        }
    }
    if let Some(bits) = data.first_chunk::<8>() {
        durations(f64::from_le_bytes(*bits));
    }
}

/// `validate_resources` against a model of its rules.
fn resource_list(names: &[String]) {
    let expected = if names.is_empty() {
        Some("resources: the resource list is empty".to_owned())
    } else {
        names.iter().enumerate().find_map(|(i, r)| {
            let reserved = ironlock::RESERVED_SUFFIXES
                .iter()
                .find(|s| r.ends_with(**s));
            if r.is_empty() {
                Some(format!("resources[{i}]: empty resource name"))
            } else if let Some(s) = reserved {
                Some(format!(
                    "resources[{i}]: a name ending in {s:?} would share a key that ironlock keeps for {:?}",
                    ironlock::cut(&r[..r.len() - s.len()])
                ))
            } else if names[..i].contains(r) {
                Some(format!(
                    "resources[{i}]: duplicate resource {:?}",
                    ironlock::cut(r)
                ))
            } else {
                None
            }
        })
    };
    match (validate_resources(names), expected) {
        (Ok(()), None) => {}
        (Err(e), Some(message)) => {
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert_eq!(e.message(), message);
        }
        (got, expected) => panic!("validate_resources({names:?}) = {got:?}, expected {expected:?}"),
    }
}

/// The float converters: accepted exactly when documented, and the value survives.
fn durations(x: f64) {
    let in_range = (0.0..TWO_POW_64).contains(&x);
    match duration_from_secs_f64("ttl", x) {
        Ok(d) => {
            assert!(in_range, "duration_from_secs_f64 accepted {x}");
            let back = d.as_secs_f64();
            assert!(
                (back - x).abs() <= x * 1e-15 + 1e-9,
                "duration_from_secs_f64({x}) = {d:?}"
            );
        }
        Err(e) => {
            assert!(!in_range, "duration_from_secs_f64 rejected {x}: {e}");
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.message().starts_with("ttl: "), "{e}");
        }
    }
    let integral = (0.0..=TWO_POW_64).contains(&x) && x.fract() == 0.0;
    match duration_from_millis_f64("wait", x) {
        Ok(d) => {
            assert!(integral, "duration_from_millis_f64 accepted {x}");
            assert_eq!(
                d.as_millis() as f64,
                x,
                "duration_from_millis_f64({x}) = {d:?}"
            );
            assert!(d <= Duration::from_millis(u64::MAX));
        }
        Err(e) => {
            assert!(!integral, "duration_from_millis_f64 rejected {x}: {e}");
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.message().starts_with("wait: "), "{e}");
        }
    }
}
