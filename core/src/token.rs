//! Lock tokens and retry jitter, both from the operating system's CSPRNG: nothing a `fork`
//! could duplicate, nothing derived from time or pid.

use crate::error::{Error, ErrorKind, Result};

/// 20 random bytes from the OS, as 40 lowercase hex characters.
pub fn new_token() -> Result<String> {
    let mut bytes = [0u8; 20];
    getrandom::fill(&mut bytes).map_err(|e| {
        Error::new(
            ErrorKind::Internal,
            format!("the OS random number generator failed: {e}"),
        )
    })?;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(40);
    for b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 15) as usize] as char);
    }
    Ok(s)
}

/// A uniform number in [0, 1) for retry jitter (0.5 if the OS RNG fails: no jitter).
pub(crate) fn random_unit() -> f64 {
    match getrandom::u64() {
        Ok(x) => (x >> 11) as f64 / (1u64 << 53) as f64,
        Err(_) => 0.5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn tokens_are_40_hex_chars_and_unique() {
        let mut seen = HashSet::new();
        for _ in 0..100_000 {
            let t = new_token().unwrap();
            assert_eq!(t.len(), 40);
            assert!(
                t.bytes()
                    .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
            );
            assert!(seen.insert(t));
        }
    }

    #[test]
    fn jitter_is_in_unit_interval() {
        for _ in 0..1000 {
            let u = random_unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
