#![no_main]
//! See `ironlock_fuzz::c_api` for the input format and the properties.
libfuzzer_sys::fuzz_target!(|data: &[u8]| ironlock_fuzz::c_api::check(data));
