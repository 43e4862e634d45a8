//! Redis Cluster hash slots: which slot a key lands in, and names for the keys ironlock keeps
//! beside a lock key (fence counter, queue, semaphore, …) that land in the lock key's own slot
//! without renaming the lock key, so that a script touching all of them runs on one shard and
//! the lock key stays what other clients (node-redlock, redis-py) use.

/// Number of hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// CRC16/XMODEM (polynomial 0x1021, initial value 0), the checksum Redis Cluster hashes with.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The hash tag of `key`: the text between its first `{` and the first `}` after it, when that
/// text is not empty (Redis hashes only that part then).
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let close = key[open + 1..].iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

/// The hash slot of `key`, as `CLUSTER KEYSLOT` computes it.
pub fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    crc16(hash_tag(bytes).unwrap_or(bytes)) % SLOTS
}

/// The name of the key that ironlock keeps beside `key` under `suffix` (`":ironlock:fence"`):
/// in `key`'s hash slot, so that both are on one shard of a cluster, and beginning with `key`
/// itself, so that it begins with the key prefix too (ACL key patterns such as `~lk:*` cover it).
///
/// - `key` has a hash tag: `key` + suffix, which keeps the tag (`{order:1}:a:ironlock:fence`);
/// - `key` holds no brace: `key{key}` + suffix, whose tag is the whole key
///   (`job:1{job:1}:ironlock:fence`);
/// - otherwise (braces but no tag, e.g. `a}b`, `a{}b`): `key{T}` + suffix with a short `T` found
///   so that the name lands in `key`'s slot.
pub fn companion(key: &str, suffix: &str) -> String {
    if hash_tag(key.as_bytes()).is_some() {
        return format!("{key}{suffix}");
    }
    if !key.contains(['{', '}']) {
        return format!("{key}{{{key}}}{suffix}");
    }
    let slot = key_slot(key);
    let tag = search(|t| key_slot(&format!("{key}{{{t}}}{suffix}")) == slot);
    format!("{key}{{{tag}}}{suffix}")
}

/// The first short alphanumeric text for which `fits` holds (a text of at most four characters
/// hits any given slot: 36^4 texts over 16384 slots).
fn search(fits: impl Fn(&str) -> bool) -> String {
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut buf = Vec::with_capacity(4);
    for len in 1..=4u32 {
        let count = (ALPHABET.len() as u64).pow(len);
        for mut n in 0..count {
            buf.clear();
            for _ in 0..len {
                buf.push(ALPHABET[(n % ALPHABET.len() as u64) as usize]);
                n /= ALPHABET.len() as u64;
            }
            let text = std::str::from_utf8(&buf).expect("ASCII");
            if fits(text) {
                return text.to_owned();
            }
        }
    }
    // 1.7 million tries without a hit would mean the hash is not CRC16; fall back to a text
    // that is at least deterministic (the caller's script then fails with CROSSSLOT on a
    // cluster, and works on every other voter).
    String::from("0")
}

/// The first short alphanumeric text whose hash slot is `slot`.
pub(crate) fn tag_for_slot(slot: u16) -> String {
    search(|t| crc16(t.as_bytes()) % SLOTS == slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from `CLUSTER KEYSLOT` and the Redis Cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(key_slot("foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
        assert_eq!(key_slot("foo{bar}{zap}"), key_slot("bar"));
    }

    #[test]
    fn companions_share_the_lock_keys_slot() {
        for key in [
            "job:1",
            "a",
            "{order:1}:x",
            "a{b",
            "a}b",
            "a{}b",
            "}{",
            "}",
            "{}",
            "x{y}z}",
            "ü{",
            "lk:job",
        ] {
            for suffix in [":ironlock:fence", ":ironlock:queue", ":ironlock:semaphore"] {
                let c = companion(key, suffix);
                assert_eq!(key_slot(&c), key_slot(key), "{key:?} -> {c:?}");
                assert!(c.ends_with(suffix) && c.starts_with(key), "{c}");
                // Companions of companions (a semaphore's limit record) stay there too.
                let cc = companion(&c, ":ironlock:limit");
                assert_eq!(key_slot(&cc), key_slot(key), "{c:?} -> {cc:?}");
            }
        }
        assert_eq!(
            companion("job:1", ":ironlock:fence"),
            "job:1{job:1}:ironlock:fence"
        );
        assert_eq!(
            companion("{o}:1", ":ironlock:fence"),
            "{o}:1:ironlock:fence"
        );
    }

    #[test]
    fn every_slot_has_a_short_tag() {
        for slot in [0, 1, 5000, 12182, SLOTS - 1] {
            let t = tag_for_slot(slot);
            assert!(
                t.len() <= 4 && crc16(t.as_bytes()) % SLOTS == slot,
                "{slot}: {t}"
            );
        }
    }
}
