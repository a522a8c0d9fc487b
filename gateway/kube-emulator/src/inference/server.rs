//! The stand-in's HTTP server: routes, the API-key check on `/v1/*`, and listening —
//! after the model-loading delay, on a loopback port of its own, until cancelled.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request as HttpRequest, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::StreamExt;
use serde_json::json;
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use super::completion::{Api, Request};
use super::options::StandinOptions;

/// The header carrying the API key where `Authorization` cannot (the API server's pod
/// proxy drops `Authorization`).
pub const KEY_HEADER: &str = "x-forge-playground-key";

/// A running stand-in server.
#[derive(Debug)]
pub struct Standin {
    addr: SocketAddr,
}

impl Standin {
    /// Waits the model-loading delay, then listens on `127.0.0.1:0` and serves until
    /// `cancel` fires. `None` if cancelled while "loading".
    pub async fn start(
        opts: StandinOptions,
        cancel: CancellationToken,
    ) -> std::io::Result<Option<Self>> {
        tokio::select! {
            () = cancel.cancelled() => return Ok(None),
            () = tokio::time::sleep(opts.load_delay) => {}
        }
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let app = router(Arc::new(opts));
        tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move { cancel.cancelled().await })
                .await;
            if let Err(e) = served {
                tracing::debug!(error = %e, "inference stand-in stopped");
            }
        });
        Ok(Some(Self { addr }))
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

type Opts = Arc<StandinOptions>;

fn router(opts: Opts) -> Router {
    let v1 = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(text))
        .layer(axum::middleware::from_fn_with_state(
            opts.clone(),
            require_key,
        ));
    Router::new()
        .route("/health", get(|| async { StatusCode::OK }))
        .merge(v1)
        .with_state(opts)
}

fn presented_key(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| headers.get(KEY_HEADER).and_then(|v| v.to_str().ok()))
}

async fn require_key(State(opts): State<Opts>, req: HttpRequest, next: Next) -> Response {
    if let Some(key) = &opts.api_key {
        let ok = presented_key(req.headers())
            .is_some_and(|k| bool::from(k.as_bytes().ct_eq(key.as_bytes())));
        if !ok {
            return (
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({"error": "Unauthorized"})),
            )
                .into_response();
        }
    }
    next.run(req).await
}

async fn models(State(opts): State<Opts>) -> Response {
    axum::Json(json!({"object": "list", "data": [{
        "id": opts.served_name, "object": "model", "created": 0, "owned_by": "vllm",
        "root": opts.model, "parent": null, "max_model_len": 4096,
    }]}))
    .into_response()
}

async fn chat(State(opts): State<Opts>, body: Bytes) -> Response {
    complete(&opts, Api::Chat, &body)
}

async fn text(State(opts): State<Opts>, body: Bytes) -> Response {
    complete(&opts, Api::Text, &body)
}

fn error(code: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "param": null,
        "code": code.as_u16()}});
    (code, axum::Json(body)).into_response()
}

fn complete(opts: &StandinOptions, api: Api, body: &[u8]) -> Response {
    let req = match Request::parse(api, body) {
        Ok(r) => r,
        Err(msg) => return error(StatusCode::BAD_REQUEST, "BadRequestError", &msg),
    };
    if req.model != opts.served_name {
        let msg = format!("The model `{}` does not exist.", req.model);
        return error(StatusCode::NOT_FOUND, "NotFoundError", &msg);
    }
    let prefix = if api == Api::Chat { "chatcmpl" } else { "cmpl" };
    let id = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
    let created = chrono::Utc::now().timestamp();
    let delay = opts.chunk_delay;
    if !req.stream {
        let full = req.full(&id, created);
        let words = req.reply().0.len();
        let wait = delay * u32::try_from(words).unwrap_or(u32::MAX);
        let body = Body::from_stream(futures::stream::once(async move {
            tokio::time::sleep(wait).await;
            Ok::<_, Infallible>(Bytes::from(full.to_string()))
        }));
        return ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    }
    let frames = req.frames(&id, created);
    let stream = futures::stream::iter(frames).then(move |f| async move {
        tokio::time::sleep(delay).await;
        Ok::<_, Infallible>(Bytes::from(f))
    });
    let headers = [
        (header::CONTENT_TYPE, "text/event-stream; charset=utf-8"),
        (header::CACHE_CONTROL, "no-cache"),
    ];
    (headers, Body::from_stream(stream)).into_response()
}
