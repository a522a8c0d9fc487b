//! The W3C `traceparent` `forge submit` sends, so that the job's trace in the
//! gateway (issue 41) hangs from the submitter: the caller's own context when the
//! environment carries one (`TRACEPARENT`, as CI systems and instrumented wrappers
//! set it), else a new sampled one whose trace id the CLI prints.

/// The context to send: `TRACEPARENT` when it is a valid version-00 value, else a new
/// random one (sampled).
pub fn for_submission() -> String {
    std::env::var("TRACEPARENT")
        .ok()
        .filter(|v| is_valid(v))
        .unwrap_or_else(fresh)
}

/// The trace id part of a valid `traceparent`.
pub fn trace_id(traceparent: &str) -> &str {
    traceparent.split('-').nth(1).unwrap_or("")
}

/// A new sampled context: random 16-byte trace id and 8-byte parent id.
fn fresh() -> String {
    let trace: u128 = rand::random::<u128>().max(1);
    let span: u64 = rand::random::<u64>().max(1);
    format!("00-{trace:032x}-{span:016x}-01")
}

/// `00-<32 hex>-<16 hex>-<2 hex>`, ids not all zero (W3C Trace Context, level 1).
fn is_valid(v: &str) -> bool {
    let parts: Vec<&str> = v.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
    matches!(parts.as_slice(), [ver, trace, span, flags]
        if *ver == "00" && hex(trace, 32) && hex(span, 16) && hex(flags, 2)
            && nonzero(trace) && nonzero(span))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_context_is_valid_and_sampled() {
        let tp = fresh();
        assert!(is_valid(&tp), "{tp}");
        assert!(tp.ends_with("-01"));
        assert_eq!(trace_id(&tp).len(), 32);
        assert_ne!(fresh(), tp);
    }

    #[test]
    fn only_well_formed_contexts_are_passed_on() {
        assert!(is_valid(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            assert!(!is_valid(bad), "{bad}");
        }
    }
}
