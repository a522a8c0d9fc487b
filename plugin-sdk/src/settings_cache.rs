//! Settings parsed once per instance: the parsed form of the last settings document,
//! reused while the document stays the same.
//!
//! The host keeps warm instances per (plugin, settings, scope), so an instance sees one
//! settings document for its whole life; parsing it on every call was several µs of
//! each decision. The cache is keyed by the document itself, so a different document
//! (as in native tests running several settings in one thread) is parsed anew. A
//! document that fails to parse is not cached.

use std::any::Any;
use std::cell::RefCell;
use std::rc::Rc;

use crate::Policy;

/// The last document and its parsed settings (of whichever `Policy` parsed it).
type Entry = (String, Rc<dyn Any>);

thread_local! {
    static LAST: RefCell<Option<Entry>> = const { RefCell::new(None) };
}

/// The settings parsed from `document`: the cached ones if the last document parsed
/// (for this policy's settings type) was the same.
pub(crate) fn parsed<P: Policy>(document: &str) -> Result<Rc<P::Settings>, String> {
    LAST.with(|cell| {
        if let Some((doc, cached)) = &*cell.borrow()
            && doc == document
            && let Ok(settings) = cached.clone().downcast::<P::Settings>()
        {
            return Ok(settings);
        }
        let settings = Rc::new(crate::parse_settings::<P>(document)?);
        let entry: Rc<dyn Any> = settings.clone();
        *cell.borrow_mut() = Some((document.to_string(), entry));
        Ok(settings)
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

        fn evaluate(_: &Settings, r: &Request) -> Decision {
            Decision::Admit(r.placement.clone())
        }
    }

    #[test]
    fn same_document_is_parsed_once_another_anew() {
        let a = parsed::<P>(r#"{"n": 1}"#).unwrap();
        let again = parsed::<P>(r#"{"n": 1}"#).unwrap();
        assert!(
            Rc::ptr_eq(&a, &again),
            "the same document is served from the cache"
        );
        let b = parsed::<P>(r#"{"n": 2}"#).unwrap();
        assert_eq!((a.n, b.n), (1, 2));
        assert!(parsed::<P>(r#"{"n": "x"}"#).unwrap_err().contains("n:"));
        // A failed parse does not evict a good entry for a different document.
        let c = parsed::<P>(r#"{"n": 2}"#).unwrap();
        assert!(Rc::ptr_eq(&b, &c));
    }
}
