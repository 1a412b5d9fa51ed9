#![no_main]
//! cargo-fuzz entry point; the body and its properties are in `src/repair.rs`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| turnstone_fuzz::repair::run(data));
