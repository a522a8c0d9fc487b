//! What one link call of a chain is given: the request and the placement so far.
//!
//! Contract 0.3.0 hands a plugin its request as a host resource it reads during the
//! call, so the resource must own (a share of) the request. The chain clones the
//! request into an `Arc` at most once per evaluation — the first time a 0.3.0 link
//! runs — and every 0.3.0 link of that evaluation shares it; the placement is kept in
//! an `Arc` by the chain for the same reason. Links of older versions read the
//! borrowed request directly.
//!
//! A link's decision depends on the teams' shares only if it read them, which the
//! input records: a caller that reuses decisions re-asks such a chain when the shares
//! change (they change with every charge of the usage ledger).

use std::cell::{Cell, OnceCell};
use std::sync::Arc;

use crate::model::{Placement, PolicyRequest};

/// One link call's input.
pub(crate) struct LinkInput<'a> {
    pub(crate) request: &'a PolicyRequest,
    pub(crate) placement: &'a Arc<Placement>,
    shared: &'a OnceCell<Arc<PolicyRequest>>,
    /// A team's link: it sees only its team's shares.
    pub(crate) team_link: bool,
    /// Whether the plugin read the teams' shares during the call.
    read_shares: Cell<bool>,
}

impl<'a> LinkInput<'a> {
    /// `shared` is the evaluation's slot for the owned request (filled on first use).
    pub(crate) fn new(
        request: &'a PolicyRequest,
        placement: &'a Arc<Placement>,
        shared: &'a OnceCell<Arc<PolicyRequest>>,
        team_link: bool,
    ) -> Self {
        LinkInput {
            request,
            placement,
            shared,
            team_link,
            read_shares: Cell::new(false),
        }
    }

    /// Records that the plugin read the shares.
    pub(crate) fn shares_were_read(&self) {
        self.read_shares.set(true);
    }

    /// Whether the plugin read the shares.
    pub(crate) fn read_shares(&self) -> bool {
        self.read_shares.get()
    }

    /// The request, owned and shared by every 0.3.0 link of the evaluation.
    pub(crate) fn shared_request(&self) -> Arc<PolicyRequest> {
        self.shared
            .get_or_init(|| Arc::new(self.request.clone()))
            .clone()
    }
}
