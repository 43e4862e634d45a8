//! Property tests of the quorum, drift and validity arithmetic and of vote classification.

use std::time::Duration;

use ironlock::{ErrorKind, classify, quorum, validity};
use proptest::prelude::*;

proptest! {
    #[test]
    fn two_quorums_always_intersect(n in 1usize..=64) {
        let q = quorum(n);
        prop_assert!(q <= n);
        prop_assert!(2 * q > n, "two disjoint sets of {q} fit in {n}");
        prop_assert!(2 * (q - 1) <= n, "quorum {q} is larger than a majority of {n}");
    }

    #[test]
    fn validity_is_what_is_left_of_the_ttl(ttl in 1u64..600_000, elapsed in 0u64..700_000, drift in 0u64..10_000) {
        let (t, e, d) = (Duration::from_micros(ttl * 1000), Duration::from_micros(elapsed), Duration::from_micros(drift * 10));
        match validity(t, e, d) {
            Some(v) => {
                prop_assert!(v > Duration::ZERO);
                prop_assert_eq!(v + e + d, t);
            }
            None => prop_assert!(e + d >= t),
        }
    }

    #[test]
    fn drift_grows_with_the_ttl_and_stays_below_it(factor in 0.0f64..0.5, constant_ms in 0u64..50, a in 100u64..60_000, b in 100u64..60_000) {
        let c = ironlock::Config::new(["redis://127.0.0.1:1"])
            .drift_factor(factor)
            .drift_constant(Duration::from_millis(constant_ms))
            .max_ttl(Duration::from_secs(60));
        let (lo, hi) = (a.min(b), a.max(b));
        let v_lo = validity(Duration::from_millis(lo), Duration::ZERO, Duration::from_millis(constant_ms) + Duration::from_millis(lo).mul_f64(factor));
        let v_hi = validity(Duration::from_millis(hi), Duration::ZERO, Duration::from_millis(constant_ms) + Duration::from_millis(hi).mul_f64(factor));
        // More ttl never yields less validity.
        prop_assert!(v_hi >= v_lo);
        prop_assert!(c.check().is_ok());
    }

    /// Each node gives its "yes" to at most one of two contenders: never are both granted.
    #[test]
    fn two_contenders_are_never_both_granted(votes in proptest::collection::vec(0u8..4, 1..=15)) {
        let n = votes.len();
        // 0: yes to A, 1: yes to B, 2: node failed, 3: node refused both (held by a third).
        let a_yes = votes.iter().filter(|v| **v == 0).count();
        let b_yes = votes.iter().filter(|v| **v == 1).count();
        let third = votes.iter().filter(|v| **v == 3).count();
        let a = classify(n, a_yes, b_yes + third, true);
        let b = classify(n, b_yes, a_yes + third, true);
        prop_assert!(!(a.is_ok() && b.is_ok()));
    }

    #[test]
    fn classification_follows_the_spec(
        (n, granted, refused) in (1usize..=15)
            .prop_flat_map(|n| (Just(n), 0..=n))
            .prop_flat_map(|(n, g)| (Just(n), Just(g), 0..=n - g)),
        left in any::<bool>(),
    ) {
        let q = quorum(n);
        match classify(n, granted, refused, left) {
            Ok(()) => prop_assert!(granted >= q && left),
            Err(ErrorKind::Contended) => prop_assert!(granted < q && refused > 0),
            Err(ErrorKind::Unavailable) => prop_assert!((granted >= q && !left) || (granted < q && refused == 0)),
            Err(other) => prop_assert!(false, "unexpected {other:?}"),
        }
    }

    #[test]
    fn bad_durations_from_bindings_are_rejected(x in any::<f64>()) {
        let s = ironlock::duration_from_secs_f64("ttl", x);
        prop_assert_eq!(s.is_ok(), x.is_finite() && x >= 0.0 && x < u64::MAX as f64);
        if let Err(e) = s { prop_assert!(e.message().starts_with("ttl")); }
        let m = ironlock::duration_from_millis_f64("ttl", x);
        prop_assert_eq!(m.is_ok(), x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x <= u64::MAX as f64);
    }

    #[test]
    fn redacted_urls_never_contain_the_password(pw in "[A-Za-z0-9]{6,20}", user in "[a-z]{0,4}", port in 1u16..65535) {
        let url = format!("redis://{user}:{pw}@127.0.0.1:{port}/0");
        let shown = ironlock::redact_url(&url);
        prop_assert!(!shown.contains(&pw), "{}", shown);
        let e = ironlock::Config::new([url.clone(), url]).check().unwrap_err();
        prop_assert!(!e.to_string().contains(&pw));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Passwords (and user names) with every reserved character, through every error path that
    /// needs no connection: validation errors, the config's Debug and `redact_url`. The marker
    /// letters (Q, X, Z, J, V, K) appear in no fixed text of these messages, so any 3-character
    /// run of the password that holds one and shows up was printed from the password.
    #[test]
    fn no_run_of_a_password_is_ever_printed(
        pw in "[QXZJVK#?/@:%&=+!$'()*,;\\[\\] ]{3,24}",
        user in "[a-z]{0,4}",
        port in 1u16..65535,
        form in 0usize..5,
    ) {
        let url = match form {
            0 => format!("redis://{user}:{pw}@127.0.0.1:{port}"),
            1 => format!("rediss://{user}:{pw}@127.0.0.1:{port}/0"),
            2 => format!("redis://:{pw}@[::1]:{port}"),
            3 => format!("unix:///tmp/r.sock?db=1&pass={pw}"),
            _ => format!("{user}:{pw}@127.0.0.1:{port}"),
        };
        // Without a scheme, a "//" in the password makes the text before it a scheme and user
        // name (`a://X:=@h` is the user X): that is another URL, not a password shown.
        prop_assume!(form != 4 || !url.contains("://"));
        let mut shown = vec![ironlock::redact_url(&url)];
        let config = ironlock::Config::new([url.as_str()]);
        shown.push(format!("{config:?}"));
        if let Err(e) = config.check() {
            shown.push(e.to_string());
        }
        // A second node: duplicate and ordering paths.
        if let Err(e) = ironlock::Config::new(["redis://127.0.0.1:1", url.as_str(), url.as_str()]).check() {
            shown.push(e.to_string());
        }
        let chars: Vec<char> = pw.chars().collect();
        for w in chars.windows(3) {
            if !w.iter().any(|c| "QXZJVK".contains(*c)) {
                continue;
            }
            let run: String = w.iter().collect();
            for text in &shown {
                prop_assert!(!text.contains(&run), "{:?} shows {:?} of {:?}: {}", url, run, pw, text);
            }
        }
    }
}
