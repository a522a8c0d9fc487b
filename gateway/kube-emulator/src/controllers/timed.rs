//! The timed run model: no process runs; how long a submitter's job takes and whether
//! it succeeds come from this model (scale tests).

use rand::Rng;

/// How long a job runs.
#[derive(Clone, Debug, PartialEq)]
pub enum RunSecs {
    /// Always this many seconds.
    Fixed(f64),
    /// Uniform in `[min, max]`.
    Uniform {
        /// Lower bound (s).
        min: f64,
        /// Upper bound (s).
        max: f64,
    },
}

/// Parameters of the timed model.
#[derive(Clone, Debug, PartialEq)]
pub struct TimedModel {
    /// Job duration.
    pub run_secs: RunSecs,
    /// Probability that the Ray job ends FAILED (driver exit ≠ 0; the submitter pod still
    /// exits 0, so the RayJob ends Failed/AppFailed).
    pub fail_ratio: f64,
    /// Probability that a submitter pod itself exits 1 (after `backoffLimit` retries the
    /// RayJob ends Failed/SubmissionFailed).
    pub submit_fail_ratio: f64,
    /// Seconds a container takes from Started to Ready.
    pub start_secs: f64,
}

impl Default for TimedModel {
    fn default() -> Self {
        Self {
            run_secs: RunSecs::Fixed(1.0),
            fail_ratio: 0.0,
            submit_fail_ratio: 0.0,
            start_secs: 0.0,
        }
    }
}

/// One draw of the model.
#[derive(Clone, Debug, PartialEq)]
pub struct Draw {
    /// Seconds the job runs.
    pub run_secs: f64,
    /// Whether the Ray job fails.
    pub app_fails: bool,
    /// Whether the submitter pod fails.
    pub submit_fails: bool,
}

impl TimedModel {
    /// Samples one job.
    pub fn draw(&self) -> Draw {
        let mut rng = rand::rng();
        let run_secs = match self.run_secs {
            RunSecs::Fixed(s) => s,
            RunSecs::Uniform { min, max } if max > min => rng.random_range(min..=max),
            RunSecs::Uniform { min, .. } => min,
        };
        Draw {
            run_secs: run_secs.max(0.0),
            app_fails: rng.random_bool(self.fail_ratio.clamp(0.0, 1.0)),
            submit_fails: rng.random_bool(self.submit_fail_ratio.clamp(0.0, 1.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_respect_the_model() {
        let m = TimedModel {
            run_secs: RunSecs::Uniform { min: 2.0, max: 3.0 },
            fail_ratio: 1.0,
            submit_fail_ratio: 0.0,
            start_secs: 0.0,
        };
        for _ in 0..100 {
            let d = m.draw();
            assert!((2.0..=3.0).contains(&d.run_secs));
            assert!(d.app_fails);
            assert!(!d.submit_fails);
        }
        assert_eq!(TimedModel::default().draw().run_secs, 1.0);
    }
}
