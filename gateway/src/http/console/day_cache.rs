//! The last day per series for the capacity page ([`crate::jobs::last_day`]), read
//! from the store at most once a minute per replica: the page is re-read on every
//! job change, and the day moves by the hour.

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use crate::jobs::last_day::{LastDay, last_day};
use crate::state::AppState;
use crate::store::{StoreError, now_ms};

/// How long a computed day is served.
const FRESH_MS: i64 = 60_000;
/// Hours drawn.
pub const HOURS: usize = 24;
/// Most jobs read (the newest): a busier day is drawn from its newest jobs.
pub const MAX_JOBS: u32 = 20_000;

/// A computed day and when.
#[derive(Debug, Default)]
pub struct DayCache {
    last: ArcSwapOption<(i64, Arc<LastDay>, bool)>,
}

impl DayCache {
    /// The last day, and whether it was cut at [`MAX_JOBS`] jobs.
    pub async fn get(&self, app: &AppState) -> Result<(Arc<LastDay>, bool), StoreError> {
        let now = now_ms();
        if let Some(hit) = self.last.load().as_ref()
            && now - hit.0 < FRESH_MS
        {
            return Ok((hit.1.clone(), hit.2));
        }
        let since = now - HOURS as i64 * crate::jobs::last_day::HOUR_MS;
        let lives = app.jobs.store().lives_since(since, MAX_JOBS).await?;
        let cut = lives.len() >= MAX_JOBS as usize;
        let day = Arc::new(last_day(&lives, now, HOURS));
        self.last.store(Some(Arc::new((now, day.clone(), cut))));
        Ok((day, cut))
    }
}
