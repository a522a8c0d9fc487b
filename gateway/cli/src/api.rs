//! The gateway's HTTP API as `forge` uses it: authenticated requests, JSON in and
//! out, and the gateway's error body (`{"error": {"code", "message"}}`) turned into
//! [`CliError::Api`] (whose status and code choose the exit code); a gateway that is
//! not ready yet (503 with `Retry-After`) is waited for, within a minute.

use std::time::Duration;

use reqwest::header;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::config::Login;
use crate::exit::CliError;
use crate::progress;

/// A client of one gateway with one token.
#[derive(Clone)]
pub struct Api {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Api {
    /// A client for `login`.
    pub fn new(login: &Login) -> Result<Self, CliError> {
        let base = login.url.trim_end_matches('/').to_string();
        url::Url::parse(&base)
            .map_err(|e| CliError::Usage(format!("gateway URL {base:?}: {e}")))?;
        let http = reqwest::Client::builder()
            .user_agent(concat!("forge/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| CliError::local("HTTP client", e))?;
        Ok(Api {
            base,
            token: login.token.clone(),
            http,
        })
    }

    /// The gateway's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// An authenticated request to `path` (starting with `/`).
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }

    /// Sends a request; a non-2xx answer becomes the gateway's error. A 503 that says
    /// when to come back (`Retry-After`) is tried again, for at most
    /// [`UNAVAILABLE_FOR`]: any read, and any request the gateway refused because it
    /// is not ready yet (`not-ready`: it did nothing). A request whose body cannot be
    /// replayed (a stream) is not.
    pub async fn send(&self, req: RequestBuilder) -> Result<Response, CliError> {
        let started = std::time::Instant::now();
        let mut request = req.build().map_err(|e| self.unreachable(&e))?;
        loop {
            let again = request.try_clone();
            let read = matches!(*request.method(), Method::GET | Method::HEAD);
            let resp = self
                .http
                .execute(request)
                .await
                .map_err(|e| self.unreachable(&e))?;
            let Some(wait) = retry_after(&resp) else {
                return check(resp).await;
            };
            let status = resp.status();
            let body: Value = resp.json().await.unwrap_or(Value::Null);
            let code = body["error"]["code"].as_str().unwrap_or_default();
            match again {
                Some(next)
                    if (read || code == "not-ready")
                        && started.elapsed() + wait <= UNAVAILABLE_FOR =>
                {
                    progress::note(format!(
                        "the gateway answered 503 {code}; trying again in {} s",
                        wait.as_secs()
                    ));
                    tokio::time::sleep(wait).await;
                    request = next;
                }
                _ => return Err(api_error(status, &body)),
            }
        }
    }

    fn unreachable(&self, e: &reqwest::Error) -> CliError {
        let mut detail = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            detail = format!("{detail}: {s}");
            source = s.source();
        }
        CliError::Unreachable {
            url: self.base.clone(),
            detail,
        }
    }

    /// `GET path` as JSON.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, CliError> {
        json(self.send(self.request(Method::GET, path)).await?).await
    }

    /// `method path` with a JSON body, answered with JSON.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, CliError> {
        json(self.send(self.request(method, path).json(body)).await?).await
    }
}

/// The body as JSON.
pub async fn json<T: DeserializeOwned>(resp: Response) -> Result<T, CliError> {
    let url = resp.url().to_string();
    let bytes = resp
        .bytes()
        .await
        .map_err(|e| CliError::local(format!("reading {url}"), e))?;
    serde_json::from_slice(&bytes).map_err(|e| CliError::local(format!("the answer of {url}"), e))
}

/// Longest `forge` keeps trying a request the gateway answers 503 with `Retry-After`.
pub const UNAVAILABLE_FOR: Duration = Duration::from_secs(60);
/// Longest single wait, whatever `Retry-After` says.
const MAX_WAIT: Duration = Duration::from_secs(10);

/// How long a 503 asks to wait (`Retry-After` in seconds, at most [`MAX_WAIT`]).
fn retry_after(resp: &Response) -> Option<Duration> {
    if resp.status() != StatusCode::SERVICE_UNAVAILABLE {
        return None;
    }
    let secs: u64 = resp
        .headers()
        .get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs.max(1)).min(MAX_WAIT))
}

/// A non-2xx response as [`CliError::Api`].
pub async fn check(resp: Response) -> Result<Response, CliError> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    Err(api_error(status, &body))
}

/// The gateway's error body as [`CliError::Api`].
fn api_error(status: StatusCode, body: &Value) -> CliError {
    let error = &body["error"];
    let code = error["code"].as_str().unwrap_or("http-error").to_string();
    let mut message = error["message"]
        .as_str()
        .map_or_else(|| format!("HTTP {status}"), str::to_string);
    // The most useful detail, on the same line.
    if let Some(fields) = error["details"]["fields"].as_array() {
        let list: Vec<String> = fields
            .iter()
            .map(|f| {
                format!(
                    "{}: {}",
                    f["field"].as_str().unwrap_or("?"),
                    f["message"].as_str().unwrap_or("?")
                )
            })
            .collect();
        message = format!("{message}: {}", list.join("; "));
    } else if let Some(reason) = error["details"]["reason"].as_str() {
        message = format!("{reason}: {message}");
    }
    CliError::Api {
        status: status.as_u16(),
        code,
        message,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::http::{HeaderMap, StatusCode as Status};
    use axum::routing::get;

    use super::*;

    /// A stand-in gateway: `/ready` answers 503 `not-ready` twice, then 200; `/slow`
    /// always 503 `cluster-unavailable`; `/down` 503 without `Retry-After`; `/busy`
    /// 503 `cluster-unavailable` once, then 200. Returns its URL and the count of
    /// requests it got.
    async fn gateway() -> (String, Arc<AtomicUsize>) {
        let hits = Arc::new(AtomicUsize::new(0));
        let unavailable = |code: &'static str, retry: bool| {
            let mut headers = HeaderMap::new();
            if retry {
                headers.insert(header::RETRY_AFTER, "1".parse().expect("header"));
            }
            let body = serde_json::json!({"error": {"code": code, "message": "later"}});
            (Status::SERVICE_UNAVAILABLE, headers, axum::Json(body))
        };
        let (a, b, c, d) = (hits.clone(), hits.clone(), hits.clone(), hits.clone());
        let busy_once = Arc::new(AtomicUsize::new(0));
        let ready = move || {
            let n = a.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 2 {
                    Err(unavailable("not-ready", true))
                } else {
                    Ok(axum::Json(serde_json::json!({"ok": true})))
                }
            }
        };
        let slow = move || {
            b.fetch_add(1, Ordering::SeqCst);
            async move { unavailable("cluster-unavailable", true) }
        };
        let down = move || {
            c.fetch_add(1, Ordering::SeqCst);
            async move { unavailable("store-unavailable", false) }
        };
        let busy = move || {
            d.fetch_add(1, Ordering::SeqCst);
            let first = busy_once.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                if first {
                    Err(unavailable("cluster-unavailable", true))
                } else {
                    Ok(axum::Json(serde_json::json!({"ok": true})))
                }
            }
        };
        let app = axum::Router::new()
            .route("/busy", get(busy))
            .route("/ready", get(ready.clone()).post(ready))
            .route("/slow", get(slow.clone()).post(slow))
            .route("/down", get(down));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, hits)
    }

    fn api(url: &str) -> Api {
        Api::new(&Login {
            url: url.to_string(),
            token: "t".into(),
        })
        .expect("client")
    }

    #[tokio::test]
    async fn a_gateway_not_ready_yet_is_waited_for() {
        let (url, hits) = gateway().await;
        let got: Value = api(&url)
            .call(Method::POST, "/ready", &serde_json::json!({}))
            .await
            .expect("answered once ready");
        assert_eq!(got["ok"], true);
        assert_eq!(hits.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn only_reads_are_retried_on_other_503s_and_never_without_retry_after() {
        let (url, hits) = gateway().await;
        let api = api(&url);
        // A write the gateway may have begun is not sent twice.
        let err = api
            .call::<Value>(Method::POST, "/slow", &serde_json::json!({}))
            .await
            .expect_err("503");
        assert!(
            matches!(&err, CliError::Api { status: 503, code, .. } if code == "cluster-unavailable"),
            "{err:?}"
        );
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        // No Retry-After: the error at once.
        let err = api.get::<Value>("/down").await.expect_err("503");
        assert!(
            matches!(&err, CliError::Api { status: 503, code, .. } if code == "store-unavailable"),
            "{err:?}"
        );
        assert_eq!(hits.load(Ordering::SeqCst), 2);
        // A read is asked again after the Retry-After the gateway gave.
        let got: Value = api.get("/busy").await.expect("answered the second time");
        assert_eq!(got["ok"], true);
        assert_eq!(hits.load(Ordering::SeqCst), 4);
    }
}
