//! Token usage of playground answers, read as they pass through the relay: the
//! `usage` object OpenAI-compatible servers put in a whole answer, or in the last
//! chunk of a streamed one (vLLM sends it when asked with
//! `stream_options: {"include_usage": true}`). What is read is bounded — a whole answer
//! is parsed only up to [`MAX_BODY`], a streamed line only up to [`MAX_LINE`] — and the
//! bytes pass on unchanged. The count is reported once, when the answer's stream ends
//! or is dropped (a client that went away still counts what it was sent).

use std::convert::Infallible;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde_json::Value;

/// Largest whole answer read for its usage.
pub const MAX_BODY: usize = 1 << 20;
/// Largest line of a streamed answer read for its usage.
pub const MAX_LINE: usize = 64 << 10;

/// Prompt and completion tokens of one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt: u64,
    pub completion: u64,
}

fn usage_of(v: &Value) -> Option<Usage> {
    let u = v.get("usage")?;
    Some(Usage {
        prompt: u.get("prompt_tokens")?.as_u64()?,
        completion: u
            .get("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}

/// Reads the usage out of the bytes of one answer.
struct Meter {
    sse: bool,
    /// The current line (SSE) or the whole body (JSON), while under its bound.
    buf: Vec<u8>,
    overflow: bool,
    usage: Option<Usage>,
    report: Option<Box<dyn FnOnce(Usage) + Send>>,
}

impl Meter {
    fn feed(&mut self, chunk: &[u8]) {
        if !self.sse {
            if !self.overflow && self.buf.len() + chunk.len() <= MAX_BODY {
                self.buf.extend_from_slice(chunk);
            } else {
                self.overflow = true;
                self.buf = Vec::new();
            }
            return;
        }
        for part in chunk.split_inclusive(|b| *b == b'\n') {
            if !self.overflow && self.buf.len() + part.len() <= MAX_LINE {
                self.buf.extend_from_slice(part);
            } else {
                self.overflow = true;
                self.buf.clear();
            }
            if part.ends_with(b"\n") {
                if !self.overflow {
                    self.line();
                }
                self.buf.clear();
                self.overflow = false;
            }
        }
    }

    /// One whole SSE line: a `data:` JSON with a usage object replaces what was seen.
    fn line(&mut self) {
        let line = self.buf.trim_ascii();
        if let Some(data) = line.strip_prefix(b"data:")
            && data.windows(7).any(|w| w == b"\"usage\"")
            && let Ok(v) = serde_json::from_slice::<Value>(data.trim_ascii())
            && let Some(u) = usage_of(&v)
        {
            self.usage = Some(u);
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        if !self.sse && !self.overflow {
            self.usage = serde_json::from_slice::<Value>(&self.buf)
                .ok()
                .as_ref()
                .and_then(usage_of);
        }
        if let (Some(u), Some(report)) = (self.usage, self.report.take()) {
            report(u);
        }
    }
}

/// `body` unchanged; `report` gets its answer's usage once it ends (or is dropped),
/// if the server reported one.
pub fn metered<S>(
    body: S,
    sse: bool,
    report: impl FnOnce(Usage) + Send + 'static,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send
where
    S: Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
{
    let meter = Meter {
        sse,
        buf: Vec::new(),
        overflow: false,
        usage: None,
        report: Some(Box::new(report)),
    };
    body.scan(meter, |meter, item| {
        if let Ok(chunk) = &item {
            meter.feed(chunk);
        }
        std::future::ready(Some(item))
    })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    async fn usage_of_chunks(chunks: &[&'static str], sse: bool) -> Option<Usage> {
        let seen = Arc::new(Mutex::new(None));
        let out = {
            let seen = seen.clone();
            let owned: Vec<Result<Bytes, Infallible>> = chunks
                .iter()
                .map(|c| Ok(Bytes::from_static(c.as_bytes())))
                .collect();
            let body = futures::stream::iter(owned);
            metered(body, sse, move |u| {
                *seen.lock().expect("lock") = Some(u);
            })
            .map(|c| c.expect("infallible"))
            .collect::<Vec<_>>()
            .await
        };
        assert_eq!(out.concat(), chunks.concat().as_bytes(), "bytes unchanged");
        *seen.lock().expect("lock")
    }

    #[tokio::test]
    async fn a_whole_answer_and_a_streamed_one_report_their_usage() {
        let whole = [
            r#"{"id":"c","choices":[],"usage":{"prompt_to"#,
            r#"kens":12,"completion_tokens":5,"total_tokens":17}}"#,
        ];
        assert_eq!(
            usage_of_chunks(&whole, false).await,
            Some(Usage {
                prompt: 12,
                completion: 5
            })
        );
        // Streamed: usage null on every chunk, then the last chunk (split) carries it.
        let streamed = [
            "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,",
            "\"completion_tokens\":9}}\n\ndata: [DONE]\n\n",
        ];
        assert_eq!(
            usage_of_chunks(&streamed, true).await,
            Some(Usage {
                prompt: 3,
                completion: 9
            })
        );
        // No usage reported: nothing counted.
        assert_eq!(
            usage_of_chunks(&["data: {\"choices\":[]}\n\n"], true).await,
            None
        );
        assert_eq!(usage_of_chunks(&["not json"], false).await, None);
    }

    #[tokio::test]
    async fn oversized_answers_and_lines_are_not_read() {
        let big: &'static str = Box::leak(
            format!(
                "data: {{\"pad\":\"{}\",\"usage\":{{\"prompt_tokens\":1}}}}\n\n",
                "x".repeat(MAX_LINE)
            )
            .into_boxed_str(),
        );
        assert_eq!(usage_of_chunks(&[big], true).await, None);
        // After an oversized line, the next line is read again.
        let after = [
            big,
            "data: {\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":1}}\n\n",
        ];
        assert_eq!(
            usage_of_chunks(&after, true).await,
            Some(Usage {
                prompt: 2,
                completion: 1
            })
        );
    }
}
