//! `forge fair-share replay`: the dispatch journal's passes ordered again by the
//! gateway (`POST /v1/fair-share/replay`, admins) — as they were, which must come out
//! byte-identical, or with other weights as a preview before `forge policy set`
//! applies them. (`forge fair-share` alone prints the table, `jobs.rs`.)

use reqwest::Method;
use serde_json::{Value, json};

use crate::api::Api;
use crate::exit::{CliError, code};
use crate::output::{Format, emit, time};

/// `forge fair-share`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum FairShareCommand {
    /// Replay the dispatch journal: each recorded pass ordered again (admins)
    #[command(
        after_help = "Examples:\n  forge fair-share replay\n  forge fair-share replay --hours 2 --weight team-b=2"
    )]
    Replay {
        /// How far back to replay, in hours
        #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..=8760))]
        hours: u32,
        /// Preview a weight instead of replaying as recorded (repeatable; teams not
        /// given weigh 1)
        #[arg(long = "weight", value_name = "TEAM=WEIGHT", value_parser = parse_weight)]
        weights: Vec<(String, f64)>,
    },
}

/// `TEAM=WEIGHT`, the weight a positive number.
fn parse_weight(s: &str) -> Result<(String, f64), String> {
    let (team, w) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected TEAM=WEIGHT"))?;
    let weight: f64 = w
        .parse()
        .map_err(|_| format!("`{w}`: the weight is not a number"))?;
    if team.trim().is_empty() || !(weight.is_finite() && weight > 0.0) {
        return Err(format!(
            "`{s}`: a team and a positive weight, like team-b=2"
        ));
    }
    Ok((team.to_string(), weight))
}

/// Runs a `forge fair-share` subcommand.
pub async fn run(api: &Api, command: FairShareCommand, format: Format) -> Result<u8, CliError> {
    match command {
        FairShareCommand::Replay { hours, weights } => replay(api, hours, &weights, format).await,
    }
}

async fn replay(
    api: &Api,
    hours: u32,
    weights: &[(String, f64)],
    format: Format,
) -> Result<u8, CliError> {
    let mut body = json!({"seconds": u64::from(hours) * 3600});
    if !weights.is_empty() {
        let map: serde_json::Map<String, Value> =
            weights.iter().map(|(t, w)| (t.clone(), json!(w))).collect();
        body["fairShare"] = json!({"weights": map});
    }
    let r: Value = api
        .call(Method::POST, "/v1/fair-share/replay", &body)
        .await?;
    emit(format, &r, || print(&r, weights))?;
    Ok(code::OK)
}

/// The replay in words: a line for the whole, then one per pass that differs.
fn print(r: &Value, weights: &[(String, f64)]) {
    let passes = r["passes"].as_u64().unwrap_or(0);
    let changed = r["passesChanged"].as_u64().unwrap_or(0);
    let sha = |k: &str| {
        r[k].as_str()
            .unwrap_or("")
            .chars()
            .take(12)
            .collect::<String>()
    };
    if weights.is_empty() {
        let verdict = if r["identical"] == true {
            format!("byte-identical (sha256 {}…)", sha("recordedSha256"))
        } else {
            format!(
                "DIFFERENT: recorded sha256 {}…, replayed {}… ({changed} passes dispatch otherwise)",
                sha("recordedSha256"),
                sha("replayedSha256")
            )
        };
        println!("replayed {passes} recorded passes: {verdict}");
    } else {
        let given: Vec<String> = weights.iter().map(|(t, w)| format!("{t}={w}")).collect();
        println!(
            "previewed {passes} recorded passes with weights {} (others 1): {changed} would dispatch otherwise",
            given.join(", ")
        );
    }
    let empty = Vec::new();
    let recorded = r["recorded"].as_array().unwrap_or(&empty);
    let replayed = r["replayed"].as_array().unwrap_or(&empty);
    let list = |p: &Value| {
        let jobs: Vec<&str> = p["dispatched"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if jobs.is_empty() {
            "nothing".to_string()
        } else {
            jobs.join(", ")
        }
    };
    for (rec, rep) in recorded.iter().zip(replayed).filter(|(a, b)| a != b) {
        println!(
            "  {}  recorded: {}  replayed: {}",
            time(rec["atMs"].as_i64().unwrap_or(0)),
            list(rec),
            list(rep)
        );
    }
    if r["truncated"] == true {
        println!("(more passes than one replay covers: narrow --hours)");
    }
}

#[cfg(test)]
mod tests {
    use super::parse_weight;

    #[test]
    fn a_weight_is_a_team_and_a_positive_number() {
        assert_eq!(parse_weight("team-b=2"), Ok(("team-b".into(), 2.0)));
        for bad in [
            "team-b",
            "=2",
            "team-b=0",
            "team-b=-1",
            "team-b=x",
            "team-b=inf",
        ] {
            assert!(parse_weight(bad).is_err(), "{bad}");
        }
    }
}
