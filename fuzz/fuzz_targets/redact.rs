#![no_main]
//! See `ironlock_fuzz::redact` for the input format and the properties.
libfuzzer_sys::fuzz_target!(|data: &[u8]| ironlock_fuzz::redact::check(data));
