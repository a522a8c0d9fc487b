//! The settings an instance was configured with (contract 0.3.0's `configure`).
//!
//! The host calls `configure` once per instance with the link's settings document,
//! before any `evaluate` or `plan-preemption`; the SDK parses and checks it there and
//! keeps the parsed form for every later call of the instance. A call that finds no
//! settings (the host skipped `configure`) fails closed.

use std::any::Any;
use std::cell::RefCell;
use std::rc::Rc;

use crate::Policy;

thread_local! {
    static SETTINGS: RefCell<Option<Rc<dyn Any>>> = const { RefCell::new(None) };
}

/// Parse and check `document` as `validate-settings` does, and keep it.
pub(crate) fn configure<P: Policy>(document: &str) -> Result<(), String> {
    let settings = crate::parse_settings::<P>(document)?;
    P::validate(&settings)?;
    let settings: Rc<dyn Any> = Rc::new(settings);
    SETTINGS.with(|cell| *cell.borrow_mut() = Some(settings));
    Ok(())
}

/// The configured settings, or why there are none.
pub(crate) fn settings<P: Policy>() -> Result<Rc<P::Settings>, String> {
    SETTINGS.with(|cell| {
        let Some(any) = cell.borrow().clone() else {
            return Err("called before configure".to_string());
        };
        any.downcast::<P::Settings>()
            .map_err(|_| "configured with another policy's settings".to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Decision, Request};

    #[derive(Debug, serde::Deserialize)]
    struct Settings {
        n: u32,
    }

    struct P;

    impl Policy for P {
        type Settings = Settings;

        fn validate(s: &Settings) -> Result<(), String> {
            if s.n == 0 {
                return Err("n must be at least 1".into());
            }
            Ok(())
        }

        fn evaluate(_: &Settings, _: &Request<'_>) -> Decision {
            Decision::admit()
        }
    }

    #[test]
    fn configured_once_then_read_and_refused_when_invalid() {
        assert!(settings::<P>().unwrap_err().contains("before configure"));
        configure::<P>(r#"{"n": 2}"#).unwrap();
        let a = settings::<P>().unwrap();
        assert!(Rc::ptr_eq(&a, &settings::<P>().unwrap()), "parsed once");
        assert_eq!(a.n, 2);
        assert!(configure::<P>(r#"{"n": "x"}"#).unwrap_err().contains("n:"));
        assert!(
            configure::<P>(r#"{"n": 0}"#)
                .unwrap_err()
                .contains("at least 1")
        );
        // A refused document leaves the configured settings as they were.
        assert_eq!(settings::<P>().unwrap().n, 2);
    }
}
