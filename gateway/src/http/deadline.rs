//! The time a request may take, by route class ([`super::route_class`]): a document
//! request must be answered within [`DOCUMENT_DEADLINE`], or it gets `408
//! request-timeout`; a bulk request takes as long as it needs, but its body may pause at
//! most `FORGE_BODY_IDLE_TIMEOUT_S` between two pieces (a stalled or trickling client is
//! cut then, and nothing it sent is kept). A relayed playground call has neither.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower_http::timeout::TimeoutBody;

use super::error::{ApiError, EdgeError};

/// Longest a document request may take.
pub const DOCUMENT_DEADLINE: Duration = Duration::from_secs(60);

/// The document deadline.
pub async fn document_deadline(req: Request, next: Next) -> Response {
    match tokio::time::timeout(DOCUMENT_DEADLINE, next.run(req)).await {
        Ok(response) => response,
        Err(_) => ApiError::from(EdgeError::Timeout(DOCUMENT_DEADLINE)).into_response(),
    }
}

/// A bulk body's longest pause, `idle`.
pub async fn idle_body(State(idle): State<Duration>, req: Request, next: Next) -> Response {
    next.run(req.map(|body| Body::new(TimeoutBody::new(idle, body))))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::body_limit::BodyLimit;
    use crate::http::route_class::{ClassLimits, RouteClass};
    use axum::Router;
    use axum::http::{Method, StatusCode};
    use axum::routing::{get, post, put};
    use futures::StreamExt;
    use tower::ServiceExt;

    fn app(idle: Duration) -> Router {
        let limit = |bytes| BodyLimit {
            bytes,
            setting: "test",
            drain: 1 << 20,
        };
        let classes = ClassLimits {
            document: limit(1 << 10),
            bulk: limit(1 << 20),
            body_idle: idle,
        };
        Router::new()
            .route(
                "/v1/slow",
                classes.apply(
                    RouteClass::Document,
                    get(|| async {
                        tokio::time::sleep(DOCUMENT_DEADLINE * 2).await;
                        "late"
                    }),
                ),
            )
            .route(
                "/v1/playgrounds/{id}/v1/{*rest}",
                classes.apply(
                    RouteClass::Relay,
                    post(|| async {
                        tokio::time::sleep(DOCUMENT_DEADLINE * 2).await;
                        "generated"
                    }),
                ),
            )
            .route(
                "/v1/uploads/{id}",
                classes.apply(
                    RouteClass::Bulk,
                    put(|body: Body| async move {
                        match axum::body::to_bytes(body, usize::MAX).await {
                            Ok(b) => (StatusCode::OK, format!("{} bytes", b.len())),
                            Err(_) => (StatusCode::BAD_REQUEST, "body interrupted".into()),
                        }
                    }),
                ),
            )
    }

    async fn status(app: Router, method: Method, uri: &str, body: Body) -> StatusCode {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .body(body)
            .expect("request");
        app.oneshot(req).await.expect("response").status()
    }

    #[tokio::test(start_paused = true)]
    async fn documents_have_a_deadline_and_playground_calls_do_not() {
        let idle = Duration::from_secs(5);
        assert_eq!(
            status(app(idle), Method::GET, "/v1/slow", Body::empty()).await,
            StatusCode::REQUEST_TIMEOUT
        );
        assert_eq!(
            status(
                app(idle),
                Method::POST,
                "/v1/playgrounds/p1/v1/chat/completions",
                Body::empty()
            )
            .await,
            StatusCode::OK
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_bulk_body_may_be_slow_but_not_silent() {
        let idle = Duration::from_secs(5);
        // A piece every 4 s for 100 s: longer than the document deadline, never idle.
        let trickle =
            futures::stream::unfold(0u32, |n| async move { (n < 25).then(|| (n, n + 1)) }).then(
                |_| async {
                    tokio::time::sleep(Duration::from_secs(4)).await;
                    Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"x"))
                },
            );
        assert_eq!(
            status(
                app(idle),
                Method::PUT,
                "/v1/uploads/u1",
                Body::from_stream(trickle)
            )
            .await,
            StatusCode::OK
        );
        // One piece, then silence: cut after the idle time.
        let stalls =
            futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"x"))])
                .chain(futures::stream::pending());
        assert_eq!(
            status(
                app(idle),
                Method::PUT,
                "/v1/uploads/u2",
                Body::from_stream(stalls)
            )
            .await,
            StatusCode::BAD_REQUEST
        );
    }
}
