//! Gives libironlock.so a SONAME, so programs record `libironlock.so` (not the build path)
//! whichever way they were linked.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libironlock.so");
}
