#![no_main]
//! See `ironlock_fuzz::config` for the input format and the properties.
libfuzzer_sys::fuzz_target!(|data: &[u8]| ironlock_fuzz::config::check(data));
