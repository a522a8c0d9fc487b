//! The gateway's HTTP API as `forge` uses it: authenticated requests, JSON in and
//! out, and the gateway's error body (`{"error": {"code", "message"}}`) turned into
//! [`CliError::Api`] (whose status and code choose the exit code).

use reqwest::{Method, RequestBuilder, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::config::Login;
use crate::exit::CliError;

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

    /// Sends a request; a non-2xx answer becomes the gateway's error.
    pub async fn send(&self, req: RequestBuilder) -> Result<Response, CliError> {
        let resp = req.send().await.map_err(|e| self.unreachable(&e))?;
        check(resp).await
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

/// A non-2xx response as [`CliError::Api`].
pub async fn check(resp: Response) -> Result<Response, CliError> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let body: Value = resp.json().await.unwrap_or(Value::Null);
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
    Err(CliError::Api {
        status: status.as_u16(),
        code,
        message,
    })
}
