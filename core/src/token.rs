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

/// The longest holder label a token may carry ([`token_with_holder`]).
pub const HOLDER_MAX_LEN: usize = 128;

/// A new token that also names who holds the lock: `<40 hex>.<holder>`, so that anyone who
/// inspects the key (`ironlock status`, `inspect`) sees it. The 40 random hex characters alone
/// make it unique; the label adds nothing secret and nothing the lock's safety depends on.
/// `holder`: 1 to [`HOLDER_MAX_LEN`] printable ASCII characters, no space (e.g. `host:pid`);
/// anything else is `InvalidArgument` naming `holder`.
pub fn token_with_holder(holder: &str) -> Result<String> {
    if holder.is_empty()
        || holder.len() > HOLDER_MAX_LEN
        || !holder.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "holder: expected 1 to {HOLDER_MAX_LEN} printable ASCII characters without spaces, got {:?}",
                holder.chars().take(40).collect::<String>()
            ),
        ));
    }
    Ok(format!("{}.{holder}", new_token()?))
}

/// The holder label of a token made by [`token_with_holder`], if it has one.
pub fn holder_of(token: &str) -> Option<&str> {
    let (random, holder) = token.split_at_checked(40)?;
    let holder = holder.strip_prefix('.')?;
    (random.bytes().all(|b| b.is_ascii_hexdigit()) && !holder.is_empty()).then_some(holder)
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
    fn a_holder_label_follows_the_random_part_and_is_read_back() {
        let t = token_with_holder("web-1:4242").unwrap();
        assert_eq!(t.len(), 40 + 1 + "web-1:4242".len());
        assert_eq!(holder_of(&t), Some("web-1:4242"));
        assert_eq!(holder_of(&new_token().unwrap()), None);
        assert_eq!(holder_of("not-a-token.web-1"), None);
        assert_ne!(t, token_with_holder("web-1:4242").unwrap());
        for bad in [
            "",
            "with space",
            "tab\t",
            "é",
            &"x".repeat(HOLDER_MAX_LEN + 1),
        ] {
            let e = token_with_holder(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.message().starts_with("holder: "), "{e}");
        }
        assert!(token_with_holder(&"x".repeat(HOLDER_MAX_LEN)).is_ok());
    }

    #[test]
    fn only_40_hex_characters_a_dot_and_a_label_make_a_holder() {
        let hex = "0123456789abcdef".repeat(3);
        let hex = &hex[..40];
        assert_eq!(holder_of(&format!("{hex}.h")), Some("h"));
        // A random part that is not hex is not one of our tokens, whatever follows it.
        assert_eq!(holder_of(&format!("{}.web-1", "z".repeat(40))), None);
        // A dot with nothing after it names no holder; no dot names none either.
        assert_eq!(holder_of(&format!("{hex}.")), None);
        assert_eq!(holder_of(&format!("{hex}web-1")), None);
    }

    #[test]
    fn jitter_is_in_unit_interval() {
        for _ in 0..1000 {
            let u = random_unit();
            assert!((0.0..1.0).contains(&u));
        }
    }

    #[test]
    fn jitter_spreads_over_the_interval() {
        // 1000 draws: both halves are hit (a constant, or a draw stuck at 0, spreads nothing).
        let draws: Vec<f64> = (0..1000).map(|_| random_unit()).collect();
        assert!(draws.iter().any(|&u| u < 0.5) && draws.iter().any(|&u| u >= 0.5));
    }
}
