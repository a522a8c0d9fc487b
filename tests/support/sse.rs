//! Reading server-sent events (the job feeds) in tests: one event at a time from a
//! `reqwest` response, with its name, id and JSON data.

use std::time::Duration;

use serde_json::Value;

/// One server-sent event: (event name, id, data).
pub type Sse = (String, Option<u64>, Value);

/// Reads the next event of a server-sent-event response (comments skipped); `buf`
/// keeps what was read past it. Panics when none arrives `within`.
pub async fn next_event(resp: &mut reqwest::Response, buf: &mut String, within: Duration) -> Sse {
    loop {
        if let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let (mut name, mut id, mut data) = (String::new(), None, String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    name = v.trim().to_string();
                } else if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().parse().ok();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim());
                }
            }
            if name.is_empty() {
                continue;
            }
            return (name, id, serde_json::from_str(&data).unwrap_or(Value::Null));
        }
        let chunk = tokio::time::timeout(within, resp.chunk())
            .await
            .expect("an event in time")
            .expect("stream")
            .expect("stream open");
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
}
