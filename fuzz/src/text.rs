//! The line format shared by the targets: `key value` per line (value = the rest of the line,
//! raw bytes), unknown keys and unparsable values ignored so mutations never dead-end.

use std::time::Duration;

/// `(key, value)` for every line; a line without a space has an empty value.
pub(crate) fn lines(data: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    data.split(|&b| b == b'\n').map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match line.iter().position(|&b| b == b' ') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &line[line.len()..]),
        }
    })
}

/// The value as text (lossy: the Rust API only takes `str`).
pub(crate) fn text(value: &[u8]) -> String {
    String::from_utf8_lossy(value).into_owned()
}

pub(crate) fn int<T: std::str::FromStr>(value: &[u8]) -> Option<T> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}

pub(crate) fn float(value: &[u8]) -> Option<f64> {
    int::<f64>(value)
}

pub(crate) fn flag(value: &[u8]) -> Option<bool> {
    match value {
        b"true" | b"1" | b"on" => Some(true),
        b"false" | b"0" | b"off" => Some(false),
        _ => None,
    }
}

/// `SECS` or `SECS.NANOS` (nanoseconds below 10^9), so every `Duration` up to
/// `Duration::MAX` (`18446744073709551615.999999999`) can be written.
pub(crate) fn duration(value: &[u8]) -> Option<Duration> {
    let s = std::str::from_utf8(value).ok()?.trim();
    let (secs, nanos) = match s.split_once('.') {
        Some((secs, nanos)) => (secs.parse().ok()?, nanos.parse::<u32>().ok()?),
        None => (s.parse().ok()?, 0),
    };
    (nanos < 1_000_000_000).then(|| Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_at_the_first_space() {
        let got: Vec<_> = lines(b"node redis://a b\r\nretry_count\n").collect();
        assert_eq!(
            got,
            vec![
                (&b"node"[..], &b"redis://a b"[..]),
                (&b"retry_count"[..], &b""[..]),
                (&b""[..], &b""[..])
            ]
        );
        assert_eq!(duration(b"1.5"), Some(Duration::new(1, 5)));
        assert_eq!(
            duration(b"18446744073709551615.999999999"),
            Some(Duration::MAX)
        );
        assert_eq!(duration(b"1.1000000000"), None);
    }
}
