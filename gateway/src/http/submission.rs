//! Reading a submission from the request: `multipart/form-data` with a `spec` part
//! (JSON, or YAML when the part's content type or file name says so) and a `code` part
//! (`.zip` / `.tar.gz`, streamed to a spool file, never held in memory); or
//! `application/json` `{"spec": {...}, "capsule": "<sha256>"}` naming a stored capsule.
//! The spec is validated here, so a submission that reaches the job domain is whole.

use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::header;
use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use super::body::{Bounded, multipart_error, read_bounded};
use super::body_limit::too_large;
use super::error::ApiError;
use crate::jobs::CodeInput;
use crate::jobspec::{self, JobSpec, SpecFormat};
use crate::state::AppState;

/// Reads and validates a submission of `caller`'s team.
pub async fn read(
    state: &AppState,
    team: &str,
    request: Request,
) -> Result<(JobSpec, CodeInput), ApiError> {
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if content_type.starts_with("multipart/form-data") {
        let multipart = Multipart::from_request(request, state)
            .await
            .map_err(|e| ApiError::bad("invalid-multipart", "body", e.body_text()))?;
        read_multipart(state, team, multipart).await
    } else {
        // A JSON submission is a document, whatever the route's bulk limit: at most
        // FORGE_MAX_DOCUMENT_KIB (a read cut by the route's limit is over it too).
        let limit = state.config.gateway.max_document_bytes();
        let body = read_bounded(request.into_body().into_data_stream(), limit)
            .await
            .map_err(|_| too_large("body", limit, "FORGE_MAX_DOCUMENT_KIB"))?;
        read_json(state, team, &body)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonSubmission {
    spec: serde_json::Value,
    capsule: String,
}

fn read_json(state: &AppState, team: &str, body: &[u8]) -> Result<(JobSpec, CodeInput), ApiError> {
    let req: JsonSubmission = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad(
            "invalid-body",
            "body",
            format!(
                "expected {{\"spec\": {{...}}, \"capsule\": \"<sha256>\"}} or a multipart \
                 upload: {e}"
            ),
        )
    })?;
    let spec = jobspec::from_value_and_validate(req.spec, &state.config, team)?;
    Ok((spec, CodeInput::Capsule(req.capsule)))
}

async fn read_multipart(
    state: &AppState,
    team: &str,
    mut multipart: Multipart,
) -> Result<(JobSpec, CodeInput), ApiError> {
    let mut spec_doc: Option<(Bytes, SpecFormat)> = None;
    let mut code: Option<tempfile::TempPath> = None;
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|e| multipart_error("body", &e))?
    {
        match field.name().unwrap_or("") {
            "spec" => {
                let yaml = field
                    .content_type()
                    .is_some_and(|c| SpecFormat::from_content_type(c) == SpecFormat::Yaml)
                    || field
                        .file_name()
                        .is_some_and(|f| f.ends_with(".yaml") || f.ends_with(".yml"));
                let bytes = match read_spec_part(state, field).await {
                    Ok(bytes) => bytes,
                    Err(e) => {
                        // Read and drop the rest (bounded by the body limit), so the
                        // client gets the answer rather than a reset connection.
                        while let Ok(Some(mut rest)) = multipart.next_field().await {
                            while let Ok(Some(_)) = rest.chunk().await {}
                        }
                        return Err(e);
                    }
                };
                let format = if yaml {
                    SpecFormat::Yaml
                } else {
                    SpecFormat::Json
                };
                spec_doc = Some((bytes, format));
            }
            "code" => code = Some(spool(state, field).await?),
            other => {
                return Err(ApiError::bad(
                    "unknown-part",
                    "body",
                    format!("unexpected multipart part `{other}` (expected `spec` and `code`)"),
                ));
            }
        }
    }
    let Some((doc, format)) = spec_doc else {
        return Err(ApiError::bad(
            "missing-part",
            "spec",
            "the `spec` part is required",
        ));
    };
    let Some(code) = code else {
        return Err(ApiError::bad(
            "missing-part",
            "code",
            "the `code` part (a .zip or .tar.gz of the job's code) is required",
        ));
    };
    let spec = jobspec::parse_and_validate(&doc, format, &state.config, team)?;
    Ok((spec, CodeInput::Upload(code)))
}

/// Reads the `spec` part, at most `FORGE_MAX_DOCUMENT_KIB`: a spec is a small document
/// even in a submission that carries a large archive.
async fn read_spec_part(
    state: &AppState,
    field: axum::extract::multipart::Field<'_>,
) -> Result<Bytes, ApiError> {
    let limit = state.config.gateway.max_document_bytes();
    read_bounded(field, limit).await.map_err(|e| match e {
        Bounded::TooLarge { .. } => too_large("spec", limit, "FORGE_MAX_DOCUMENT_KIB"),
        Bounded::Failed(e) => multipart_error("spec", &e),
    })
}

/// Streams the `code` part to a temporary file in the spool directory (removed when
/// the returned path is dropped).
async fn spool(
    state: &AppState,
    mut field: axum::extract::multipart::Field<'_>,
) -> Result<tempfile::TempPath, ApiError> {
    let spool = crate::spool::dir(&state.config.gateway.data_dir);
    tokio::fs::create_dir_all(&spool)
        .await
        .map_err(|e| ApiError::internal("spool dir", e))?;
    let tmp = tempfile::Builder::new()
        .prefix(".upload-")
        .tempfile_in(&spool)
        .map_err(|e| ApiError::internal("spool file", e))?;
    let (file, path) = tmp.into_parts();
    let mut out = tokio::fs::File::from_std(file);
    while let Some(chunk) = field
        .chunk()
        .await
        .map_err(|e| multipart_error("code", &e))?
    {
        out.write_all(&chunk)
            .await
            .map_err(|e| ApiError::internal("spooling the upload", e))?;
    }
    out.flush()
        .await
        .map_err(|e| ApiError::internal("spooling the upload", e))?;
    Ok(path)
}
