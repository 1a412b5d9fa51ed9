//! Stable-Rust replay of every fuzz target (cargo-fuzz itself needs nightly).
//!
//! Each target runs over its committed corpus (`fuzz/corpus/<target>/`, the
//! inputs cargo-fuzz kept, minimized) and over a bounded number of inputs
//! generated from fixed seeds. A failure names the corpus file or the seed;
//! `TURNSTONE_FUZZ_SEED=n` replays one generated input, and
//! `TURNSTONE_FUZZ_CASES=n` runs `n` generated inputs per target instead of
//! the default (a long run on stable when no nightly toolchain is around).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::Instant;

use turnstone_fuzz::{decode, ops, recovery_image, repair, surface};

fn corpus_files(target: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.is_file());
    files.sort();
    files
}

/// Deterministic input bytes for `seed`: xorshift, length up to `max_len`.
fn generated(seed: u64, max_len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let len = (next() % (max_len as u64 + 1)) as usize;
    (0..len).map(|_| next() as u8).collect()
}

fn run_one(f: fn(&[u8]), data: &[u8]) -> Result<(), String> {
    catch_unwind(AssertUnwindSafe(|| f(data))).map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

fn replay(target: &str, f: fn(&[u8]), describe: fn(&[u8]) -> String, cases: u64, max_len: usize) {
    let started = Instant::now();
    let files = corpus_files(target);
    for path in &files {
        let data = std::fs::read(path).expect("read corpus file");
        if let Err(msg) = run_one(f, &data) {
            panic!("{target}: corpus file {} fails: {msg}", path.display());
        }
    }
    let seeds: Vec<u64> = match std::env::var("TURNSTONE_FUZZ_SEED") {
        Ok(s) => vec![s.parse().expect("TURNSTONE_FUZZ_SEED is a number")],
        Err(_) => {
            let n = std::env::var("TURNSTONE_FUZZ_CASES")
                .ok()
                .map(|s| s.parse().expect("TURNSTONE_FUZZ_CASES is a number"))
                .unwrap_or(cases);
            (0..n).collect()
        }
    };
    for seed in &seeds {
        let data = generated(*seed, max_len);
        if let Err(msg) = run_one(f, &data) {
            if std::env::var("TURNSTONE_FUZZ_SEED").is_ok() {
                eprintln!("input: {}", describe(&data));
            }
            panic!(
                "{target}: generated input with seed {seed} fails \
                 (replay: TURNSTONE_FUZZ_SEED={seed} cargo test -p turnstone-fuzz-replay {target}): {msg}"
            );
        }
    }
    eprintln!(
        "{target}: {} corpus inputs + {} generated inputs in {:.1} s",
        files.len(),
        seeds.len(),
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn decode() {
    replay("decode", decode::run, decode::describe, 200_000, 1024);
}

#[test]
fn recovery_image() {
    replay(
        "recovery_image",
        recovery_image::run,
        recovery_image::describe,
        4_000,
        2048,
    );
}

#[test]
fn ops() {
    replay("ops", ops::run, ops::describe, 6_000, 1024);
}

#[test]
fn repair() {
    replay("repair", repair::run, repair::describe, 4_000, 1024);
}

#[test]
fn surface() {
    replay("surface", surface::run, surface::describe, 100_000, 1024);
}
