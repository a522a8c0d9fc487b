//! The request a policy decides about, read lazily.
//!
//! In contract 0.3.0 the host hands `evaluate` a borrowed handle to the request and
//! the plugin reads it part by part; each part is copied into the plugin's memory on
//! first use and kept for the rest of the call. A policy that only looks at the job
//! never pays for the cluster snapshot. Natively (the [`harness`](crate::harness)),
//! every part is given up front.

use std::cell::OnceCell;

use crate::bindings::forge::policy::request_view::Request as HostRequest;
use crate::{Cluster, Fleet, Job, Placement, SeriesUsage, TeamShare};

/// Every part of a request, as the native harness builds it.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestParts {
    pub job: Job,
    pub cluster: Cluster,
    pub fleets: Vec<Fleet>,
    pub usage: Vec<SeriesUsage>,
    pub shares: Vec<TeamShare>,
    pub placement: Placement,
}

/// One admission's inputs: the job, the cluster, the team's usage, the teams' shares
/// and the placement so far. Valid for one `evaluate` call.
pub struct Request<'a> {
    source: Source<'a>,
}

enum Source<'a> {
    /// Read from the host on first use.
    Host {
        handle: &'a HostRequest,
        read: Box<Read>,
    },
    /// Built natively.
    Given(Box<RequestParts>),
}

/// The parts read from the host so far.
#[derive(Default)]
struct Read {
    job: OnceCell<Job>,
    cluster: OnceCell<Cluster>,
    fleets: OnceCell<Vec<Fleet>>,
    usage: OnceCell<Vec<SeriesUsage>>,
    shares: OnceCell<Vec<TeamShare>>,
    placement: OnceCell<Placement>,
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            Source::Host { .. } => f.write_str("Request(host)"),
            Source::Given(parts) => f.debug_tuple("Request").field(parts).finish(),
        }
    }
}

/// One accessor: the given part, or the host's, read once.
macro_rules! part {
    ($(#[$doc:meta])* $name:ident -> $ty:ty) => {
        $(#[$doc])*
        pub fn $name(&self) -> &$ty {
            match &self.source {
                Source::Given(parts) => &parts.$name,
                Source::Host { handle, read } => read.$name.get_or_init(|| handle.$name()),
            }
        }
    };
}

impl<'a> Request<'a> {
    /// A request read from the host through `handle` (what the exported `evaluate`
    /// receives).
    pub fn from_host(handle: &'a HostRequest) -> Self {
        Request {
            source: Source::Host {
                handle,
                read: Box::default(),
            },
        }
    }

    /// A request with every part given (native tests, benchmarks).
    pub fn from_parts(parts: RequestParts) -> Request<'static> {
        Request {
            source: Source::Given(Box::new(parts)),
        }
    }

    /// Replace the placement so far, as a chain does after an admit that changed it
    /// (native chains and tests; the host does this itself between links).
    pub fn replace_placement(&mut self, placement: Placement) {
        match &mut self.source {
            Source::Given(parts) => parts.placement = placement,
            Source::Host { read, .. } => read.placement = OnceCell::from(placement),
        }
    }

    part!(
        /// The job being placed.
        job -> Job
    );
    part!(
        /// The cluster snapshot, every fleet summed.
        cluster -> Cluster
    );
    part!(
        /// The fleets behind the gateway with their own capacity (one, `default`, on a
        /// single-cluster gateway).
        fleets -> Vec<Fleet>
    );
    part!(
        /// The team's usage, one entry per series it uses.
        usage -> Vec<SeriesUsage>
    );
    part!(
        /// Fair-share standing per team and series (a team's own policies see only
        /// their team's).
        shares -> Vec<TeamShare>
    );
    part!(
        /// The placement so far in the chain.
        placement -> Placement
    );
}
