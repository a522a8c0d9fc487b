//! Kubernetes resource quantities (`500m`, `8`, `64Gi`, `1e9`) as the numbers Forge
//! computes with: CPU in millicores, memory in bytes. Parsing is `kube_quantity`'s;
//! this module only fixes the units and the rounding (up, like the scheduler's
//! accounting of a request: a fraction of a milli-CPU or byte still takes a whole one).

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_quantity::ParsedQuantity;

/// A quantity in its base unit (cores, bytes), or `None` if it is not one.
fn parse(q: &str) -> Option<ParsedQuantity> {
    let q = q.trim();
    if q.starts_with('-') {
        return None; // resources are never negative (and `--1` would parse as 1)
    }
    ParsedQuantity::try_from(Quantity(q.to_string())).ok()
}

/// CPU millicores of a quantity (`500m` → 500, `2` → 2000), rounded up; `None` for
/// something that is not a non-negative quantity.
pub fn cpu_millis(q: &str) -> Option<u64> {
    let milli = parse(q)?.to_bytes_f64()? * 1000.0;
    (milli.is_finite() && milli >= 0.0 && milli < u64::MAX as f64).then(|| milli.ceil() as u64)
}

/// Bytes of a quantity (`64Gi`, `500M`, `1e9`), rounded up; `None` for something that
/// is not a non-negative quantity.
pub fn bytes(q: &str) -> Option<u64> {
    // Through f64: `kube_quantity`'s integer conversions truncate fractions (`1.5Gi`).
    let f = parse(q)?.to_bytes_f64()?;
    (f.is_finite() && f >= 0.0 && f < u64::MAX as f64).then(|| f.ceil() as u64)
}

/// A byte count as a Kubernetes quantity, in the largest binary unit that divides it
/// (`34359738368` → `32Gi`), so manifests read like hand-written ones.
pub fn bytes_quantity(bytes: u64) -> String {
    for (unit, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        if bytes != 0 && bytes.is_multiple_of(1u64 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Millicores as a Kubernetes quantity (`2000` → `2`, `500` → `500m`).
pub fn cpu_quantity(millis: u64) -> String {
    if millis.is_multiple_of(1000) {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_and_memory_like_the_scheduler() {
        assert_eq!(cpu_millis("500m"), Some(500));
        assert_eq!(cpu_millis("2"), Some(2000));
        assert_eq!(cpu_millis("1.5"), Some(1500));
        assert_eq!(cpu_millis("0.0001"), Some(1), "rounded up");
        assert_eq!(bytes("64Gi"), Some(64 << 30));
        assert_eq!(bytes("500M"), Some(500_000_000));
        assert_eq!(bytes("1e9"), Some(1_000_000_000));
        assert_eq!(bytes("1.5Gi"), Some(3 << 29));
        for bad in ["", "lots", "1Qi", "--1"] {
            assert_eq!(bytes(bad), None, "{bad}");
            assert_eq!(cpu_millis(bad), None, "{bad}");
        }
    }

    #[test]
    fn formats_round_numbers() {
        assert_eq!(bytes_quantity(32 << 30), "32Gi");
        assert_eq!(bytes_quantity(1536 << 20), "1536Mi");
        assert_eq!(bytes_quantity(1000), "1000");
        assert_eq!(cpu_quantity(8000), "8");
        assert_eq!(cpu_quantity(2500), "2500m");
    }
}
