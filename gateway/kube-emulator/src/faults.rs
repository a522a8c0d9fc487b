//! Fault injection for tests: fail the next N matching requests with 500 or 429
//! (with `Retry-After`), delay every response, drop all open watch connections, and
//! compact the store so older resourceVersions answer 410 Gone. Usable in-process
//! ([`Faults`]) and over HTTP at `/_sim/faults` (see the README).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::error::ApiError;
use crate::store::Store;

/// A rule failing the next `count` requests that match it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FailRule {
    /// How many requests to fail.
    pub count: u32,
    /// HTTP code: 500 (InternalError), 429 (TooManyRequests), 413
    /// (RequestEntityTooLarge) or 400 (BadRequest).
    pub code: u16,
    /// Retry-After seconds for 429 (default 1).
    #[serde(default)]
    pub retry_after_seconds: Option<u32>,
    /// Only requests whose path contains this substring.
    #[serde(default)]
    pub path_contains: Option<String>,
    /// Only this Kubernetes verb (`get`, `list`, `watch`, `create`, `update`,
    /// `patch`, `delete`, `deletecollection`).
    #[serde(default)]
    pub verb: Option<String>,
}

/// Body of `POST /_sim/faults`; every field optional, applied in order.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultRequest {
    /// Add a failure rule.
    #[serde(default)]
    pub fail: Option<FailRule>,
    /// Set the response delay in milliseconds (0 disables).
    #[serde(default)]
    pub delay_ms: Option<u64>,
    /// Drop all open watch connections now.
    #[serde(default)]
    pub drop_watches: bool,
    /// Expire all resourceVersions older than now.
    #[serde(default)]
    pub compact: bool,
}

/// Current fault state (`GET /_sim/faults`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultState {
    /// Pending failure rules.
    pub rules: Vec<FailRule>,
    /// Response delay in milliseconds.
    pub delay_ms: u64,
}

/// Handle to the emulator's fault injection.
#[derive(Debug)]
pub struct Faults {
    state: Mutex<FaultState>,
    drop_tx: watch::Sender<u64>,
    store: Arc<Store>,
}

impl Faults {
    pub(crate) fn new(store: Arc<Store>) -> Self {
        Self {
            state: Mutex::new(FaultState::default()),
            drop_tx: watch::channel(0).0,
            store,
        }
    }

    /// Fails the next `count` requests with HTTP `code` (500 or 429).
    pub fn fail_next(&self, count: u32, code: u16) {
        self.add_rule(FailRule {
            count,
            code,
            ..FailRule::default()
        });
    }

    /// Adds a failure rule.
    pub fn add_rule(&self, rule: FailRule) {
        self.state
            .lock()
            .expect("faults lock poisoned")
            .rules
            .push(rule);
    }

    /// Delays every API response by `delay` (zero disables).
    pub fn set_delay(&self, delay: Duration) {
        self.state.lock().expect("faults lock poisoned").delay_ms =
            u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
    }

    /// Closes every open watch connection now (clients see a clean end of stream).
    pub fn drop_watches(&self) {
        self.drop_tx.send_modify(|v| *v += 1);
    }

    /// Expires all resourceVersions older than the current one: watches and continue
    /// tokens from them get 410 Gone.
    pub fn compact(&self) {
        self.store.compact();
    }

    /// Removes all rules and the delay.
    pub fn clear(&self) {
        *self.state.lock().expect("faults lock poisoned") = FaultState::default();
    }

    /// Snapshot of the current state.
    pub fn state(&self) -> FaultState {
        self.state.lock().expect("faults lock poisoned").clone()
    }

    /// Applies an HTTP fault request.
    pub fn apply(&self, req: FaultRequest) {
        if let Some(rule) = req.fail {
            self.add_rule(rule);
        }
        if let Some(ms) = req.delay_ms {
            self.set_delay(Duration::from_millis(ms));
        }
        if req.drop_watches {
            self.drop_watches();
        }
        if req.compact {
            self.compact();
        }
    }

    pub(crate) fn drop_signal(&self) -> watch::Receiver<u64> {
        self.drop_tx.subscribe()
    }

    pub(crate) fn delay(&self) -> Duration {
        Duration::from_millis(self.state.lock().expect("faults lock poisoned").delay_ms)
    }

    /// Consumes one matching rule, returning the error to answer with.
    pub(crate) fn check(&self, path: &str, verb: &str) -> Option<ApiError> {
        let mut st = self.state.lock().expect("faults lock poisoned");
        let idx = st.rules.iter().position(|r| {
            r.count > 0
                && r.path_contains.as_deref().is_none_or(|p| path.contains(p))
                && r.verb
                    .as_deref()
                    .is_none_or(|v| v.eq_ignore_ascii_case(verb))
        })?;
        let rule = &mut st.rules[idx];
        rule.count -= 1;
        let err = match rule.code {
            429 => ApiError::TooManyRequests {
                retry_after: rule.retry_after_seconds.unwrap_or(1),
            },
            413 => ApiError::RequestEntityTooLarge(format!(
                "Request entity too large: limit is 3145728 (injected fault for {verb} {path})"
            )),
            400 => ApiError::BadRequest(format!("injected fault for {verb} {path}")),
            _ => ApiError::Internal(format!("injected fault for {verb} {path}")),
        };
        if rule.count == 0 {
            st.rules.remove(idx);
        }
        Some(err)
    }
}
