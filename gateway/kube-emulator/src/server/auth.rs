//! The bearer token the emulator may require (`SimConfig::token`): every request but
//! the public health and version endpoints must carry `Authorization: Bearer <token>`,
//! else 401 with the `Status` a real API server sends. `forge-gateway dev` sets a fresh
//! token and writes it into the kubeconfig it prints, so other local users and the
//! job processes it runs (which get no kubeconfig) cannot drive the cluster.

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sha2::{Digest, Sha256};

/// Paths anyone may read (the real API server's `system:public-info-viewer`).
const PUBLIC: &[&str] = &["/healthz", "/livez", "/readyz", "/version"];

/// Rejects `req` unless it is public or carries `token`.
pub async fn require_token(token: std::sync::Arc<str>, req: Request, next: Next) -> Response {
    if PUBLIC.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    // Compared as digests: the time taken says nothing about the token's bytes.
    let ok =
        presented.is_some_and(|p| Sha256::digest(p.as_bytes()) == Sha256::digest(token.as_bytes()));
    if ok {
        return next.run(req).await;
    }
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": "Unauthorized", "reason": "Unauthorized", "code": 401,
    });
    (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
