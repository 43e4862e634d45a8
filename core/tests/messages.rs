//! Errors explain themselves: the one-line message summarizes why each node that did not grant
//! did not (the same text reaches Python's str(e), Node's err.message, C's last error, the CLI).

mod common;

use common::{SEC, cluster, config, manager, unique};
use ironlock::{Config, ErrorKind, LockManager};

#[tokio::test]
async fn fresh_nodes_in_restart_quarantine_are_named_with_the_time_left() {
    let c = cluster(3);
    let m = LockManager::new(Config::new(c.urls()).retry_count(0))
        .await
        .unwrap();
    let e = m.acquire(&[unique("q")], SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    let text = e.message();
    assert!(
        text.contains(
            "3 of 3 nodes are in restart quarantine (restarted 0 s ago; counted again in 6"
        ),
        "{text}"
    );
    assert!(text.contains("see restart_quarantine"), "{text}");
}

#[tokio::test]
async fn refusals_and_dead_nodes_are_named_per_node() {
    let mut c = cluster(3);
    let holder = manager(&c).await;
    let r = unique("held");
    let lock = holder.acquire(&[&r], 10 * SEC).await.unwrap();
    c.kill(2).unwrap();
    let m = LockManager::new(config(&c).retry_count(0)).await.unwrap();
    let e = m.acquire(&[&r], SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Contended);
    let text = e.message();
    let urls = c.urls();
    assert!(text.contains("nodes did not grant: "), "{text}");
    // The round is decided by the first refusal: the other live node may still be pending.
    assert!(
        (0..2).any(|i| text.contains(&format!("held by another client ({})", urls[i]))),
        "{text}"
    );
    assert!(text.contains(&format!("({})", urls[2])), "{text}");
    assert!(text.to_lowercase().contains("refused"), "{text}");
    lock.release().await;
}
