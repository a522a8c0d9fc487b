//! Reading request bodies, with the API's JSON errors (never axum's plain-text ones):
//!
//! - [`read_bounded`]: the one bounded read of a body or a part — it keeps at most
//!   `limit` bytes and reads and drops the rest, so the client gets the 413 rather than a
//!   reset connection;
//! - [`body_bytes`] / [`DocumentBytes`]: a whole body under its route's limit
//!   ([`BodyLimit`], set by the route's class): `413 body-too-large` past it;
//! - [`JsonBody`]: a JSON document, deserialized as JSON Schema reads numbers
//!   (`domain::json_number`); a body that is not the document is `400` with the
//!   document's own code;
//! - [`multipart_error`]: a multipart part that cannot be read — 413 when the body limit
//!   cut it, else `400 invalid-multipart`.

use axum::body::Bytes;
use axum::extract::multipart::MultipartError;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use futures::{Stream, StreamExt};
use serde::de::DeserializeOwned;

use super::body_limit::BodyLimit;
use super::error::ApiError;

/// Why a bounded read stopped.
#[derive(Debug)]
pub enum Bounded<E> {
    /// More than the limit was sent (all of it was read): how much.
    TooLarge { size: usize },
    /// The stream failed.
    Failed(E),
}

/// The bytes of `stream`, at most `limit` of them: past the limit the rest is read and
/// dropped, and the answer is [`Bounded::TooLarge`].
pub async fn read_bounded<S, E>(stream: S, limit: usize) -> Result<Bytes, Bounded<E>>
where
    S: Stream<Item = Result<Bytes, E>>,
{
    let mut stream = std::pin::pin!(stream);
    let (mut kept, mut size) = (Vec::new(), 0usize);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(Bounded::Failed)?;
        size = size.saturating_add(chunk.len());
        if size <= limit {
            kept.extend_from_slice(&chunk);
        }
    }
    if size > limit {
        return Err(Bounded::TooLarge { size });
    }
    Ok(Bytes::from(kept))
}

/// Whether `e` (or one of its causes) is a body cut at its limit.
fn cut_at_limit(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = c.source();
    }
    false
}

/// The whole body of `req`, at most its route's limit.
pub async fn body_bytes(req: Request) -> Result<Bytes, ApiError> {
    let limit = req.extensions().get::<BodyLimit>().copied();
    let bytes = limit.map_or(usize::MAX, |l| l.bytes);
    let exceeded = || match limit {
        Some(l) => l.exceeded("body"),
        None => super::body_limit::too_large("body", bytes, "limit"),
    };
    read_bounded(req.into_body().into_data_stream(), bytes)
        .await
        .map_err(|e| match e {
            Bounded::TooLarge { .. } => exceeded(),
            Bounded::Failed(e) if cut_at_limit(&e) => exceeded(),
            Bounded::Failed(e) => ApiError::bad(
                "invalid-body",
                "body",
                format!("the body could not be read: {e}"),
            ),
        })
}

/// A document-sized body's raw bytes (its route's limit applies).
#[derive(Debug)]
pub struct DocumentBytes(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for DocumentBytes {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        body_bytes(req).await.map(DocumentBytes)
    }
}

/// A JSON request document.
pub trait JsonDocument: DeserializeOwned {
    /// The code of a body that is not this document (`invalid-policy`, …).
    const INVALID: &'static str;
    /// What the document is, for the message (`a policy document`).
    const WHAT: &'static str;

    /// What an empty body stands for, if it may be empty.
    fn when_empty() -> Option<Self> {
        None
    }
}

/// A JSON document body of type `T`.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: JsonDocument> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let bytes = body_bytes(req).await?;
        if bytes.is_empty()
            && let Some(empty) = T::when_empty()
        {
            return Ok(JsonBody(empty));
        }
        // Every document is an object: serde would also read a struct from an array.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::bad(
                T::INVALID,
                "body",
                format!("not {}: a JSON object is expected", T::WHAT),
            ));
        }
        crate::domain::json_number::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad(T::INVALID, "body", format!("not {}: {e}", T::WHAT)))
    }
}

/// A part of a multipart body that could not be read: 413 when the body limit cut it,
/// else `400 invalid-multipart`.
pub fn multipart_error(field: &str, e: &MultipartError) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        super::error::EdgeError::TooLarge {
            field: field.to_string(),
            message: e.body_text(),
        }
        .into()
    } else {
        ApiError::bad("invalid-multipart", field, e.body_text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(n: usize, size: usize) -> impl Stream<Item = Result<Bytes, std::io::Error>> {
        futures::stream::iter((0..n).map(move |_| Ok(Bytes::from(vec![b'x'; size]))))
    }

    #[tokio::test]
    async fn a_bounded_read_keeps_at_most_the_limit_and_reads_the_rest() {
        let whole = read_bounded(chunks(4, 10), 40).await.expect("within");
        assert_eq!(whole.len(), 40);
        let read = std::sync::atomic::AtomicUsize::new(0);
        let counted = chunks(10, 10).inspect(|_| {
            read.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        assert!(matches!(
            read_bounded(counted, 40).await,
            Err(Bounded::TooLarge { size: 100 })
        ));
        assert_eq!(
            read.load(std::sync::atomic::Ordering::Relaxed),
            10,
            "the rest was read and dropped"
        );
        let failing = futures::stream::iter([
            Ok(Bytes::from_static(b"x")),
            Err(std::io::Error::other("gone")),
        ]);
        assert!(matches!(
            read_bounded(failing, 40).await,
            Err(Bounded::Failed(_))
        ));
    }
}
