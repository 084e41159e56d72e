//! Compile-time behaviour of `#[cluster::service]`: every error case with its pinned message,
//! and the cases that must compile (the contract's example, hygiene, a renamed crate).

#[test]
fn service_attribute() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/macros/fail/*.rs");
    t.pass("tests/macros/pass/*.rs");
}
