//! Fault injection for tests: fail the next N matching requests with 500 or 429
//! (with `Retry-After`), delay every response, hold matching requests until released
//! (a call in flight for as long as a test needs), drop all open watch connections,
//! and compact the store so older resourceVersions answer 410 Gone. Usable in-process
//! ([`Faults`]) and over HTTP at `/_sim/faults` (see the README).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::error::ApiError;
use crate::store::Store;

/// Which requests a rule applies to: every condition given must be met, and an absent
/// one always is. Flattened into each rule, so its fields sit beside the rule's own.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Matching {
    /// Only requests whose path contains this substring.
    #[serde(default)]
    pub path_contains: Option<String>,
    /// Only this Kubernetes verb (`get`, `list`, `watch`, `create`, `update`,
    /// `patch`, `delete`, `deletecollection`), ignoring case.
    #[serde(default)]
    pub verb: Option<String>,
    /// Only requests whose query string (as sent, percent-encoded) contains this
    /// substring: e.g. `job-id` matches the lists that select on `forge.dev/job-id`.
    #[serde(default)]
    pub query_contains: Option<String>,
    /// Only requests whose `User-Agent` contains this substring: one client's calls
    /// (e.g. `forge-gateway/`, a network partition between it and the API server).
    #[serde(default)]
    pub user_agent_contains: Option<String>,
}

impl Matching {
    /// Also only requests whose path contains `p`.
    pub fn path_contains(mut self, p: &str) -> Self {
        self.path_contains = Some(p.to_owned());
        self
    }

    /// Also only the verb `v`.
    pub fn verb(mut self, v: &str) -> Self {
        self.verb = Some(v.to_owned());
        self
    }

    /// Also only requests whose query string contains `q`.
    pub fn query_contains(mut self, q: &str) -> Self {
        self.query_contains = Some(q.to_owned());
        self
    }

    /// Also only requests whose `User-Agent` contains `ua`.
    pub fn user_agent_contains(mut self, ua: &str) -> Self {
        self.user_agent_contains = Some(ua.to_owned());
        self
    }

    fn matches(&self, req: &Request<'_>) -> bool {
        self.path_contains
            .as_deref()
            .is_none_or(|p| req.path.contains(p))
            && self
                .verb
                .as_deref()
                .is_none_or(|v| v.eq_ignore_ascii_case(req.verb))
            && self
                .query_contains
                .as_deref()
                .is_none_or(|q| req.query.contains(q))
            && self
                .user_agent_contains
                .as_deref()
                .is_none_or(|ua| req.user_agent.contains(ua))
    }
}

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
    /// Which requests it fails.
    #[serde(flatten)]
    pub matching: Matching,
}

/// A rule serving the next `count` requests that match it and then answering each
/// with a 500 instead of its result: the request took effect (a create stored its
/// object) but its client cannot tell — an API server failing after it committed, or
/// a connection lost on the way back.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LoseAnswerRule {
    /// How many answers to lose.
    pub count: u32,
    /// Which requests it applies to.
    #[serde(flatten)]
    pub matching: Matching,
}

/// A rule killing the API server right after it serves the next request that matches
/// it, before it answers: the request took effect (a create is in the store, as in
/// etcd), its connection and every other one close unanswered, and nothing listens on
/// the address for `downMs`. Then the server listens again on the same address with
/// its store intact, as a restarted kube-apiserver would. One crash per rule.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CrashRule {
    /// How long the server stays down, in milliseconds.
    pub down_ms: u64,
    /// Which request it follows.
    #[serde(flatten)]
    pub matching: Matching,
}

/// A rule holding every request that matches it (before it is served) until the
/// holds are released: the client sees a call in flight, not yet answered. It has no
/// field of its own: which requests it holds is all there is to it.
pub type HoldRule = Matching;

/// The parts of a request a rule looks at.
pub(crate) struct Request<'a> {
    pub(crate) path: &'a str,
    /// As sent, percent-encoded; empty when there is none.
    pub(crate) query: &'a str,
    pub(crate) verb: &'a str,
    /// Empty when there is none.
    pub(crate) user_agent: &'a str,
}

/// One request in [`FaultState::held`] until dropped.
struct HeldCount<'a>(&'a Faults);

impl Drop for HeldCount<'_> {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.held = st.held.saturating_sub(1);
    }
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
    /// Add a hold rule.
    #[serde(default)]
    pub hold: Option<HoldRule>,
    /// Add a rule losing answers of served requests.
    #[serde(default)]
    pub lose_answer: Option<LoseAnswerRule>,
    /// Add a rule killing the server after a request it serves.
    #[serde(default)]
    pub crash: Option<CrashRule>,
    /// Remove every hold rule, letting the held requests through.
    #[serde(default)]
    pub release: bool,
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
    /// Hold rules in force.
    #[serde(default)]
    pub holds: Vec<HoldRule>,
    /// Requests held right now.
    #[serde(default)]
    pub held: u32,
    /// Pending rules losing the answers of served requests.
    #[serde(default)]
    pub lost_answers: Vec<LoseAnswerRule>,
    /// Pending crash rules.
    #[serde(default)]
    pub crashes: Vec<CrashRule>,
    /// How many times the server was killed by a crash rule.
    #[serde(default)]
    pub crashed: u32,
}

/// Handle to the emulator's fault injection.
#[derive(Debug)]
pub struct Faults {
    state: Mutex<FaultState>,
    drop_tx: watch::Sender<u64>,
    release_tx: watch::Sender<u64>,
    /// A crash's down time, sent to the server loop (`server::serve`).
    crash_tx: watch::Sender<Duration>,
    store: Arc<Store>,
}

impl Faults {
    pub(crate) fn new(store: Arc<Store>) -> Self {
        Self {
            state: Mutex::new(FaultState::default()),
            drop_tx: watch::channel(0).0,
            release_tx: watch::channel(0).0,
            crash_tx: watch::channel(Duration::ZERO).0,
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
        self.lock().rules.push(rule);
    }

    /// Delays every API response by `delay` (zero disables).
    pub fn set_delay(&self, delay: Duration) {
        self.lock().delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
    }

    /// Serves the next requests matching `rule` and answers each with a 500 (see
    /// [`LoseAnswerRule`]).
    pub fn lose_answers(&self, rule: LoseAnswerRule) {
        self.lock().lost_answers.push(rule);
    }

    /// Kills the server after the next request matching `rule` (see [`CrashRule`]).
    pub fn crash(&self, rule: CrashRule) {
        self.lock().crashes.push(rule);
    }

    /// Holds every request matching `rule` until [`Faults::release`].
    pub fn hold(&self, rule: HoldRule) {
        self.lock().holds.push(rule);
    }

    /// Removes every hold rule: held requests go on to be served.
    pub fn release(&self) {
        self.lock().holds.clear();
        self.release_tx.send_modify(|v| *v += 1);
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

    /// Removes all rules, holds (releasing what they held) and the delay.
    pub fn clear(&self) {
        let mut st = self.lock();
        let (held, crashed) = (st.held, st.crashed);
        *st = FaultState {
            held,
            crashed,
            ..FaultState::default()
        };
        drop(st);
        self.release_tx.send_modify(|v| *v += 1);
    }

    /// Snapshot of the current state.
    pub fn state(&self) -> FaultState {
        self.lock().clone()
    }

    /// Applies an HTTP fault request.
    pub fn apply(&self, req: FaultRequest) {
        if let Some(rule) = req.fail {
            self.add_rule(rule);
        }
        if let Some(ms) = req.delay_ms {
            self.set_delay(Duration::from_millis(ms));
        }
        if let Some(rule) = req.hold {
            self.hold(rule);
        }
        if let Some(rule) = req.lose_answer {
            self.lose_answers(rule);
        }
        if let Some(rule) = req.crash {
            self.crash(rule);
        }
        if req.release {
            self.release();
        }
        if req.drop_watches {
            self.drop_watches();
        }
        if req.compact {
            self.compact();
        }
    }

    /// Changes with each crash, to its down time.
    pub(crate) fn crash_signal(&self) -> watch::Receiver<Duration> {
        self.crash_tx.subscribe()
    }

    /// After a request was served: whether a crash rule kills the server now (the
    /// rule is used up and the server loop told).
    pub(crate) fn crashes_after(&self, req: &Request<'_>) -> bool {
        let mut st = self.lock();
        let Some(idx) = st.crashes.iter().position(|r| r.matching.matches(req)) else {
            return false;
        };
        let rule = st.crashes.remove(idx);
        st.crashed += 1;
        drop(st);
        self.crash_tx
            .send_replace(Duration::from_millis(rule.down_ms));
        true
    }

    pub(crate) fn drop_signal(&self) -> watch::Receiver<u64> {
        self.drop_tx.subscribe()
    }

    pub(crate) fn delay(&self) -> Duration {
        Duration::from_millis(self.lock().delay_ms)
    }

    /// Waits while a hold rule matches the request.
    pub(crate) async fn wait_while_held(&self, req: &Request<'_>) {
        let mut released = self.release_tx.subscribe();
        let held = |st: &FaultState| st.holds.iter().any(|h| h.matches(req));
        {
            let mut st = self.lock();
            if !held(&st) {
                return;
            }
            st.held += 1;
        }
        // Counted while it waits, also when the request is dropped meanwhile (its
        // client went away).
        let _counted = HeldCount(self);
        while held(&self.lock()) {
            if released.changed().await.is_err() {
                break;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state.lock().expect("faults lock poisoned")
    }

    /// After a request was served: whether a lose-answer rule takes its answer (the
    /// rule's count goes down by one).
    pub(crate) fn answer_lost(&self, req: &Request<'_>) -> Option<ApiError> {
        let mut st = self.lock();
        let idx = st
            .lost_answers
            .iter()
            .position(|r| r.count > 0 && r.matching.matches(req))?;
        let rule = &mut st.lost_answers[idx];
        rule.count -= 1;
        if rule.count == 0 {
            st.lost_answers.remove(idx);
        }
        Some(ApiError::Internal(format!(
            "injected fault after serving {} {}: the answer is lost",
            req.verb, req.path
        )))
    }

    /// Consumes one matching rule, returning the error to answer with.
    pub(crate) fn check(&self, req: &Request<'_>) -> Option<ApiError> {
        let mut st = self.lock();
        let Request { path, verb, .. } = *req;
        let idx = st
            .rules
            .iter()
            .position(|r| r.count > 0 && r.matching.matches(req))?;
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
