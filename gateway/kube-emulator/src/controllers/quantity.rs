//! Kubernetes resource quantities (`500m`, `1Gi`, `2`, `1e3`) as integer milli-units,
//! for the scheduler's fit checks and KubeRay's `num-cpus`/`memory` derivation.
//! k8s-openapi's `Quantity` is only a string wrapper, so the parse lives here.

/// Errors of quantity parsing.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QuantityError {
    /// The string is not a Kubernetes quantity.
    #[error("invalid quantity {0:?}")]
    Invalid(String),
}

/// Parses a quantity into milli-units (1 CPU = 1000, `1Gi` = 1073741824000), rounding
/// fractional milli-units up like the API server does for canonical forms.
pub fn parse_milli(s: &str) -> Result<i128, QuantityError> {
    let bad = || QuantityError::Invalid(s.to_owned());
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    if num.is_empty() {
        return Err(bad());
    }
    let (negative, num) = match num.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, num.strip_prefix('+').unwrap_or(num)),
    };
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    if !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac_part.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    // value = digits * 10^(exp10) * 2^(exp2)
    let digits: i128 = format!("{int_part}{frac_part}")
        .parse()
        .map_err(|_| bad())?;
    let mut exp10: i32 = -(frac_part.len() as i32);
    let mut exp2: u32 = 0;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 = 10,
        "Mi" => exp2 = 20,
        "Gi" => exp2 = 30,
        "Ti" => exp2 = 40,
        "Pi" => exp2 = 50,
        "Ei" => exp2 = 60,
        other => {
            let e = other.strip_prefix(['e', 'E']).ok_or_else(bad)?;
            exp10 += e.parse::<i32>().map_err(|_| bad())?;
        }
    }
    exp10 += 3; // milli-units
    let mut v = digits.checked_mul(1i128 << exp2).ok_or_else(bad)?;
    if exp10 >= 0 {
        v = v
            .checked_mul(10i128.checked_pow(exp10 as u32).ok_or_else(bad)?)
            .ok_or_else(bad)?;
    } else {
        let d = 10i128.checked_pow((-exp10) as u32).ok_or_else(bad)?;
        v = (v + d - 1) / d;
    }
    Ok(if negative { -v } else { v })
}

/// Whole units, rounded up (`500m` → 1), as KubeRay does for `num-cpus`.
pub fn ceil_units(milli: i128) -> i128 {
    (milli + 999).div_euclid(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_forms() {
        assert_eq!(parse_milli("500m"), Ok(500));
        assert_eq!(parse_milli("2"), Ok(2000));
        assert_eq!(parse_milli("1.5"), Ok(1500));
        assert_eq!(parse_milli("1Gi"), Ok(1_073_741_824_000));
        assert_eq!(parse_milli("200Mi"), Ok(200 * 1_048_576 * 1000));
        assert_eq!(parse_milli("1k"), Ok(1_000_000));
        assert_eq!(parse_milli("1e3"), Ok(1_000_000));
        assert_eq!(parse_milli("100n"), Ok(1));
        assert!(parse_milli("abc").is_err());
        assert!(parse_milli("1Qi").is_err());
        assert!(parse_milli("").is_err());
    }

    #[test]
    fn ceil_rounds_up() {
        assert_eq!(ceil_units(500), 1);
        assert_eq!(ceil_units(2000), 2);
        assert_eq!(ceil_units(2001), 3);
    }
}
