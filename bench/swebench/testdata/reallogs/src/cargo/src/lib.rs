// Rust tests, run as SWE-bench runs its Rust repos: cargo test --no-fail-fast
#[cfg(test)]
mod tests {
    #[test]
    fn adds() { assert_eq!(2 + 2, 4); } // passes

    #[test]
    fn subtracts_wrongly() { assert_eq!(3 - 1, 1); } // fails

    #[test]
    fn panics() { panic!("boom"); } // errors: libtest calls it FAILED

    #[test]
    #[ignore]
    fn ignored() { assert!(false); } // skipped (ignored)

    #[test]
    #[should_panic]
    fn expected_panic() { panic!("expected"); } // passes
}
