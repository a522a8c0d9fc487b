//! pool-series
