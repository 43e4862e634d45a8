//! Gives libironlock.so its versioned SONAME, `libironlock.so.0`: programs record the ABI
//! generation they were linked against (not the build path), and a later generation
//! (`libironlock.so.1`, only ever for an incompatible change, which the rules in the header
//! forbid within a generation) can be installed beside it.
//!
//! Also links `libironlock.so.0` -> `libironlock.so` in the build's output folder, so programs
//! linked against `target/<profile>/libironlock.so` (the tests, the demo, the benchmark) find
//! their SONAME there at run time.
use std::path::PathBuf;

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libironlock.so.0");
    println!("cargo:rerun-if-changed=build.rs");
    // OUT_DIR is <target>/<profile>/build/ironlock-ffi-<hash>/out.
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        return;
    };
    if let Some(profile_dir) = out.ancestors().nth(3) {
        let link = profile_dir.join("libironlock.so.0");
        if std::fs::symlink_metadata(&link).is_err() {
            let _ = std::os::unix::fs::symlink("libironlock.so", &link);
        }
    }
}
