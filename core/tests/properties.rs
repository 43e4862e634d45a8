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
