//! The compile-time rule of `Session::append`: the three surface kinds need a
//! surface op, every other kind must not take one. Each case must fail to
//! compile with the expected type error (stderr snapshots next to the cases).

#[test]
fn surface_intent_is_enforced_at_compile_time() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}
