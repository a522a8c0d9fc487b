//! The stand-in's answers: a deterministic reply to the prompt (one "token" per word)
//! and the OpenAI-compatible bodies vLLM returns for it — the whole completion, or the
//! SSE chunks of a streamed one (`data: {...}` frames, then `data: [DONE]`).

use serde_json::{Value, json};

/// Which API a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Api {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Text,
}

/// The words of the reply to `prompt`, each with its trailing space except the last:
/// concatenated they are `Stand-in reply to: <prompt>` (whitespace normalised).
pub fn reply_words(prompt: &str) -> Vec<String> {
    let words: Vec<&str> = ["Stand-in", "reply", "to:"]
        .into_iter()
        .chain(prompt.split_whitespace())
        .collect();
    let n = words.len();
    words
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            if i + 1 < n {
                format!("{w} ")
            } else {
                w.to_owned()
            }
        })
        .collect()
}

/// A parsed completion request.
#[derive(Debug)]
pub(super) struct Request {
    pub(super) api: Api,
    pub(super) model: String,
    pub(super) prompt: String,
    pub(super) prompt_tokens: usize,
    pub(super) stream: bool,
    pub(super) include_usage: bool,
    pub(super) max_tokens: Option<usize>,
}

impl Request {
    /// Reads a request body; `Err` is the message of a 400.
    pub(super) fn parse(api: Api, body: &[u8]) -> Result<Self, String> {
        let v: Value =
            serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
        let model = v["model"]
            .as_str()
            .ok_or("field `model` is required")?
            .to_owned();
        let (prompt, all) = match api {
            Api::Chat => {
                let msgs = v["messages"]
                    .as_array()
                    .filter(|m| !m.is_empty())
                    .ok_or("field `messages` must be a non-empty array")?;
                let text = |m: &Value| match &m["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join(" "),
                    _ => String::new(),
                };
                let last_user = msgs
                    .iter()
                    .rev()
                    .find(|m| m["role"] == "user")
                    .map(text)
                    .unwrap_or_default();
                let all: Vec<String> = msgs.iter().map(text).collect();
                (last_user, all.join(" "))
            }
            Api::Text => {
                let p = match &v["prompt"] {
                    Value::String(s) => s.clone(),
                    Value::Array(a) => a
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" "),
                    _ => return Err("field `prompt` is required".into()),
                };
                (p.clone(), p)
            }
        };
        let max_tokens = v["max_completion_tokens"]
            .as_u64()
            .or_else(|| v["max_tokens"].as_u64())
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        Ok(Self {
            api,
            model,
            prompt,
            prompt_tokens: all.split_whitespace().count(),
            stream: v["stream"].as_bool().unwrap_or(false),
            include_usage: v
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                == Some(true),
            max_tokens,
        })
    }

    /// The reply's words (capped by `max_tokens`) and the finish reason.
    pub(super) fn reply(&self) -> (Vec<String>, &'static str) {
        let mut words = reply_words(&self.prompt);
        match self.max_tokens {
            Some(max) if max < words.len() => {
                words.truncate(max);
                (words, "length")
            }
            _ => (words, "stop"),
        }
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.api, chunk) {
            (Api::Chat, false) => "chat.completion",
            (Api::Chat, true) => "chat.completion.chunk",
            (Api::Text, _) => "text_completion",
        }
    }

    fn usage(&self, completion: usize) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        })
    }

    /// The whole (non-streamed) completion.
    pub(super) fn full(&self, id: &str, created: i64) -> Value {
        let (words, finish) = self.reply();
        let text: String = words.concat();
        let choice = match self.api {
            Api::Chat => json!({"index": 0, "message": {"role": "assistant", "content": text},
                "logprobs": null, "finish_reason": finish}),
            Api::Text => {
                json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish})
            }
        };
        json!({"id": id, "object": self.object(false), "created": created, "model": self.model,
            "choices": [choice], "usage": self.usage(words.len())})
    }

    /// The SSE frames of the streamed completion, in order, `data: [DONE]` last.
    pub(super) fn frames(&self, id: &str, created: i64) -> Vec<String> {
        let (words, finish) = self.reply();
        let chunk = |choice: Value| {
            json!({"id": id, "object": self.object(true), "created": created,
                "model": self.model, "choices": [choice]})
        };
        let mut out = Vec::new();
        if self.api == Api::Chat {
            out.push(chunk(
                json!({"index": 0, "delta": {"role": "assistant", "content": ""},
                "logprobs": null, "finish_reason": null}),
            ));
        }
        for w in &words {
            out.push(chunk(match self.api {
                Api::Chat => json!({"index": 0, "delta": {"content": w}, "logprobs": null,
                    "finish_reason": null}),
                Api::Text => {
                    json!({"index": 0, "text": w, "logprobs": null, "finish_reason": null})
                }
            }));
        }
        out.push(chunk(match self.api {
            Api::Chat => {
                json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": finish})
            }
            Api::Text => json!({"index": 0, "text": "", "logprobs": null, "finish_reason": finish}),
        }));
        if self.include_usage {
            out.push(
                json!({"id": id, "object": self.object(true), "created": created,
                "model": self.model, "choices": [], "usage": self.usage(words.len())}),
            );
        }
        let mut frames: Vec<String> = out.iter().map(|v| format!("data: {v}\n\n")).collect();
        frames.push("data: [DONE]\n\n".to_owned());
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reply_is_deterministic_and_capped() {
        let body = br#"{"model":"m","messages":[{"role":"system","content":"be brief"},
            {"role":"user","content":"hello   there"}],"max_tokens":4}"#;
        let r = Request::parse(Api::Chat, body).expect("parse");
        assert_eq!(r.prompt, "hello   there");
        assert_eq!(r.prompt_tokens, 4);
        let (words, finish) = r.reply();
        assert_eq!(words.concat(), "Stand-in reply to: hello ");
        assert_eq!(finish, "length");
        let full = r.full("id-1", 7);
        assert_eq!(
            full["choices"][0]["message"]["content"],
            "Stand-in reply to: hello "
        );
        assert_eq!(full["usage"]["completion_tokens"], 4);
        assert_eq!(reply_words("a b").concat(), "Stand-in reply to: a b");
    }

    #[test]
    fn streamed_frames_end_with_done_and_carry_usage_on_request() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],
            "stream":true,"stream_options":{"include_usage":true}}"#;
        let r = Request::parse(Api::Chat, body).expect("parse");
        let frames = r.frames("id", 1);
        // role chunk + 4 words + finish chunk + usage chunk + [DONE]
        assert_eq!(frames.len(), 8, "{frames:?}");
        assert!(
            frames
                .iter()
                .all(|f| f.starts_with("data: ") && f.ends_with("\n\n"))
        );
        assert_eq!(frames.last().map(String::as_str), Some("data: [DONE]\n\n"));
        let usage: Value =
            serde_json::from_str(frames[6].trim_start_matches("data: ").trim()).expect("json");
        assert_eq!(usage["usage"]["completion_tokens"], 4);
        let text = Request::parse(Api::Text, br#"{"model":"m","prompt":"x"}"#).expect("parse");
        assert_eq!(
            text.full("i", 1)["choices"][0]["text"],
            "Stand-in reply to: x"
        );
    }

    #[test]
    fn bad_requests_say_which_field() {
        let e = Request::parse(Api::Chat, br#"{"messages":[]}"#).expect_err("no model");
        assert!(e.contains("`model`"), "{e}");
        let e = Request::parse(Api::Chat, br#"{"model":"m","messages":[]}"#).expect_err("empty");
        assert!(e.contains("`messages`"), "{e}");
        let e = Request::parse(Api::Text, br#"{"model":"m"}"#).expect_err("no prompt");
        assert!(e.contains("`prompt`"), "{e}");
        assert!(Request::parse(Api::Chat, b"{").is_err());
    }
}
