//! What one link call of a chain is given: the request and the placement so far.
//!
//! Contract 0.3.0 hands a plugin its request as a host resource it reads during the
//! call, so the resource must own (a share of) the request. The chain clones the
//! request into an `Arc` at most once per evaluation — the first time a 0.3.0 link
//! runs — and every 0.3.0 link of that evaluation shares it; the placement is kept in
//! an `Arc` by the chain for the same reason. Links of older versions read the
//! borrowed request directly.

use std::cell::OnceCell;
use std::sync::Arc;

use crate::model::{Placement, PolicyRequest};

/// One link call's input.
pub(crate) struct LinkInput<'a> {
    pub(crate) request: &'a PolicyRequest,
    pub(crate) placement: &'a Arc<Placement>,
    shared: &'a OnceCell<Arc<PolicyRequest>>,
}

impl<'a> LinkInput<'a> {
    /// `shared` is the evaluation's slot for the owned request (filled on first use).
    pub(crate) fn new(
        request: &'a PolicyRequest,
        placement: &'a Arc<Placement>,
        shared: &'a OnceCell<Arc<PolicyRequest>>,
    ) -> Self {
        LinkInput {
            request,
            placement,
            shared,
        }
    }

    /// The request, owned and shared by every 0.3.0 link of the evaluation.
    pub(crate) fn shared_request(&self) -> Arc<PolicyRequest> {
        self.shared
            .get_or_init(|| Arc::new(self.request.clone()))
            .clone()
    }
}
