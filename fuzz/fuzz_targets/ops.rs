#![no_main]
//! cargo-fuzz entry point; the body and its properties are in `src/ops.rs`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| turnstone_fuzz::ops::run(data));
