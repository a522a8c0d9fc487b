//! How the console words things for people, in one place so every page agrees:
//! - times are relative ("3 min ago", "in 5 min") with the exact UTC time on hover, and
//!   a machine-readable `datetime` that always has three millisecond digits (the
//!   script re-words them as time passes);
//! - messages from policies and the cluster are text: a name quoted in backticks, as
//!   plugins write them, is shown as code, never with the backticks;
//! - internal words are replaced by plain ones ("unplaced" → "no series chosen yet").

use maud::{Markup, html};
use time::format_description::BorrowedFormatItem;
use time::macros::format_description;

use crate::store::now_ms;

/// The series key of a job whose pools name no series yet (the dispatcher's word).
const UNPLACED: &str = "unplaced";

/// A time for people: relative, the exact UTC time on hover.
pub fn when(ms: i64) -> Markup {
    when_at(ms, now_ms())
}

/// [`when`] as seen at `now` (Unix milliseconds).
pub fn when_at(ms: i64, now: i64) -> Markup {
    html! { time datetime=(iso(ms)) title=(exact(ms)) data-rel { (relative(ms, now)) } }
}

/// `ms` as RFC 3339 UTC with exactly three fractional digits.
pub fn iso(ms: i64) -> String {
    format_ms(
        ms,
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"),
    )
}

/// `ms` to the second, in UTC, for people.
pub fn exact(ms: i64) -> String {
    format_ms(
        ms,
        format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC"),
    )
}

fn format_ms(ms: i64, format: &[BorrowedFormatItem<'_>]) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(format).ok())
        .unwrap_or_else(|| ms.to_string())
}

/// An RFC 3339 time (as Kubernetes writes them) as Unix milliseconds.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let t =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

/// How long ago (or how far ahead) `ms` is from `now`, in the largest whole unit.
pub fn relative(ms: i64, now: i64) -> String {
    let delta = now.saturating_sub(ms);
    let secs = delta.unsigned_abs() / 1000;
    if secs < 10 {
        return "just now".to_string();
    }
    let span = match secs {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min", s / 60),
        s if s < 48 * 3600 => format!("{} h", s / 3600),
        s => format!("{} days", s / 86_400),
    };
    if delta >= 0 {
        format!("{span} ago")
    } else {
        format!("in {span}")
    }
}

/// A duration in milliseconds, in the largest whole units that matter ("1 h 5 min").
pub fn duration(ms: i64) -> String {
    if ms < 1000 {
        return "under 1 s".to_string();
    }
    let secs = ms / 1000;
    match secs {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min {} s", s / 60, s % 60),
        s => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// `n` things, singular or plural: "1 node", "3 nodes".
pub fn count(n: impl Into<u64>, one: &str) -> String {
    match n.into() {
        1 => format!("1 {one}"),
        n => format!("{n} {one}s"),
    }
}

/// A message as text: spans quoted in backticks become code, and no backtick is shown.
pub fn message(text: &str) -> Markup {
    let parts: Vec<&str> = text.split('`').collect();
    // An odd count of backticks leaves the last one unmatched: show it as text.
    let paired = parts.len() % 2 == 1;
    html! {
        @for (i, part) in parts.iter().enumerate() {
            @if i % 2 == 1 && (paired || i + 1 < parts.len()) { code { (part) } }
            @else if i % 2 == 1 { "`" (part) }
            @else { (part) }
        }
    }
}

/// A series name for people.
pub fn series(name: &str) -> &str {
    if name == UNPLACED {
        "no series chosen yet"
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_have_three_millisecond_digits_and_an_exact_form() {
        assert_eq!(iso(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso(1_764_547_227_050), "2025-12-01T00:00:27.050Z");
        assert_eq!(iso(1_764_547_227_368), "2025-12-01T00:00:27.368Z");
        assert_eq!(exact(1_764_547_227_368), "2025-12-01 00:00:27 UTC");
    }

    #[test]
    fn kubernetes_times_parse_whatever_their_fraction() {
        assert_eq!(
            parse_rfc3339("2025-12-01T00:00:27.05Z"),
            Some(1_764_547_227_050)
        );
        assert_eq!(
            parse_rfc3339("2025-12-01T00:00:27Z"),
            Some(1_764_547_227_000)
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn relative_times_use_the_largest_unit_both_ways() {
        let now = 1_000_000_000;
        assert_eq!(relative(now - 3_000, now), "just now");
        assert_eq!(relative(now - 42_000, now), "42 s ago");
        assert_eq!(relative(now - 185_000, now), "3 min ago");
        assert_eq!(relative(now - 7_200_000, now), "2 h ago");
        assert_eq!(relative(now - 3 * 86_400_000, now), "3 days ago");
        assert_eq!(relative(now + 300_000, now), "in 5 min");
        let markup = when_at(now - 185_000, now).into_string();
        assert!(
            markup.contains(r#"title="1970-01-12 13:43:35 UTC""#),
            "{markup}"
        );
        assert!(markup.contains(">3 min ago<"), "{markup}");
    }

    #[test]
    fn durations_read_in_whole_units() {
        assert_eq!(duration(420), "under 1 s");
        assert_eq!(duration(42_000), "42 s");
        assert_eq!(duration(125_000), "2 min 5 s");
        assert_eq!(duration(3_900_000), "1 h 5 min");
    }

    #[test]
    fn messages_show_quoted_names_as_code_without_backticks() {
        let m = message("team `team-a` runs 9 of its 16 `h100` GPUs").into_string();
        assert_eq!(
            m,
            "team <code>team-a</code> runs 9 of its 16 <code>h100</code> GPUs"
        );
        assert_eq!(message("a ` b").into_string(), "a ` b");
        assert_eq!(message("<b>").into_string(), "&lt;b&gt;");
    }

    #[test]
    fn counts_agree_with_their_number() {
        assert_eq!(count(1u32, "node"), "1 node");
        assert_eq!(count(0u32, "job"), "0 jobs");
        assert_eq!(count(16u32, "GPU"), "16 GPUs");
    }

    #[test]
    fn internal_words_are_plain() {
        assert_eq!(series("unplaced"), "no series chosen yet");
        assert_eq!(series("h100"), "h100");
    }
}
