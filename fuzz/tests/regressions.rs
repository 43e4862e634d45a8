//! Replays every committed input through the fuzz targets' properties without libFuzzer
//! (`cargo test` in fuzz/): the seed corpus in `corpus/<target>/` and every input that once
//! failed, kept in `regressions/<target>/` with a name saying what it broke.

use std::fs;
use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut count = 0;
    let mut failures = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        let mut paths: Vec<_> = entries.map(|e| e.expect("readable entry").path()).collect();
        paths.sort();
        for path in paths {
            let data = fs::read(&path).expect("readable input");
            let name = path.display().to_string();
            if std::panic::catch_unwind(|| check(&data)).is_err() {
                failures.push(name);
            }
            count += 1;
        }
    }
    assert!(count > 0, "{target}: no committed inputs");
    assert!(
        failures.is_empty(),
        "{target}: inputs failing their properties: {failures:#?}"
    );
}

#[test]
fn config() {
    replay("config", ironlock_fuzz::config::check);
}

#[test]
fn redact() {
    replay("redact", ironlock_fuzz::redact::check);
}

#[test]
fn resources() {
    replay("resources", ironlock_fuzz::resources::check);
}

#[test]
fn c_api() {
    replay("c_api", ironlock_fuzz::c_api::check);
}
