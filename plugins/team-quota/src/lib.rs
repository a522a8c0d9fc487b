//! team-quota
