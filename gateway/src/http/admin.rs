//! Administration (admins only): `GET /v1/admin/orphans` — the Forge-managed RayJobs in
//! the namespace that this installation did not create or whose job its store does not
//! know, each with why. They are never deleted by the gateway; this is how an operator
//! finds them (another installation's, or left over after restoring a store).

use axum::Json;
use axum::extract::State;

use super::error::ApiError;
use crate::auth::Caller;
use crate::jobs::lifecycle::OrphanReport;
use crate::state::AppState;

/// `GET /v1/admin/orphans`: a fresh scan.
pub async fn orphans(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<OrphanReport>, ApiError> {
    caller.require_admin()?;
    Ok(Json(state.jobs.lifecycle.orphans().await?))
}
