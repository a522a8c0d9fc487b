//! The inference stand-in: what a pod of the configured inference image
//! ([`ControllerConfig::inference_image`](crate::ControllerConfig::inference_image))
//! runs in process mode instead of vLLM. A small OpenAI-compatible server that speaks
//! the part of vLLM's HTTP API a gateway relies on, deterministically, so the whole
//! path (pod, readiness, `pods/proxy`, streaming) is exercised without a GPU:
//!
//! * `GET /health`: 200 (unauthenticated, like vLLM);
//! * `GET /v1/models`: the served model;
//! * `POST /v1/chat/completions` and `POST /v1/completions`: a deterministic reply
//!   (`stream: true` gives SSE `data:` chunks, one word each, then `data: [DONE]`).
//!
//! How it is configured (`options`): vLLM's own argv (`vllm serve <model>
//! --served-model-name N --api-key K --port P`) and `VLLM_API_KEY`, plus two
//! emulator-only knobs, as flags or environment variables: a per-chunk delay
//! (`--kubesim-chunk-delay-ms` / `KUBESIM_CHUNK_DELAY_MS`) and a model-loading delay
//! (`--kubesim-load-delay-ms` / `KUBESIM_LOAD_DELAY_MS`) before the server listens.
//!
//! The API key: vLLM checks `Authorization: Bearer <key>`. The API server's pod proxy
//! drops the caller's `Authorization` header (kube-apiserver removes it once it has
//! authenticated the request), so the stand-in also accepts the key as
//! [`KEY_HEADER`], the header a key-checking front of the real image reads.
//!
//! Files: `options` (argv/env), `completion` (the reply and its JSON/SSE bodies),
//! `server` (routes, auth, listening).

mod completion;
mod options;
mod server;

pub use completion::reply_words;
pub use options::StandinOptions;
pub use server::{KEY_HEADER, Standin};
