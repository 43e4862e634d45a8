//! Every core bug listed as open in `src/known.rs` still reproduces from its inputs
//! (`regressions/<target>/core-bug-<flag in kebab case>*`) with all relaxations off. When core is
//! fixed this fails, naming the flag to set to `false`.

use std::fs;
use std::path::Path;

use ironlock_fuzz::known;

fn check_of(target: &str) -> fn(&[u8]) {
    match target {
        "config" => ironlock_fuzz::config::check,
        "redact" => ironlock_fuzz::redact::check,
        "resources" => ironlock_fuzz::resources::check,
        "c_api" => ironlock_fuzz::c_api::check,
        other => panic!("regressions/{other}: no such target"),
    }
}

/// `(target, file)` of every input kept for the bug `flag`.
fn inputs(flag: &str) -> Vec<(String, std::path::PathBuf)> {
    let prefix = format!("core-bug-{}", flag.to_lowercase().replace('_', "-"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    let mut found = Vec::new();
    for dir in fs::read_dir(&root).expect("regressions/") {
        let dir = dir.expect("entry").path();
        let target = dir.file_name().unwrap().to_string_lossy().into_owned();
        for file in fs::read_dir(&dir).expect("regressions/<target>/") {
            let file = file.expect("entry").path();
            if file
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&prefix)
            {
                found.push((target.clone(), file));
            }
        }
    }
    found.sort();
    found
}

fn assert_state(flag: &str, open: bool) {
    let inputs = inputs(flag);
    assert!(
        !inputs.is_empty(),
        "known::{flag} has no input in regressions/"
    );
    for (target, file) in inputs {
        let data = fs::read(&file).expect("readable input");
        let check = check_of(&target);
        let reproduces = known::strict(|| std::panic::catch_unwind(|| check(&data)).is_err());
        assert_eq!(
            reproduces,
            open,
            "{}: known::{flag} is {open} but the input {}",
            file.display(),
            if reproduces {
                "still fails"
            } else {
                "passes: set the flag to false"
            }
        );
    }
}

#[test]
fn drift_overflow() {
    assert_state("DRIFT_OVERFLOW", known::DRIFT_OVERFLOW);
}

#[test]
fn redact_text() {
    assert_state("REDACT_TEXT", known::REDACT_TEXT);
}

#[test]
fn scheme_text() {
    assert_state("SCHEME_TEXT", known::SCHEME_TEXT);
}
