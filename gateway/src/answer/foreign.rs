//! The answers of errors defined in the other crates of the workspace, which cannot
//! declare them beside their definitions (they know nothing of HTTP): a capsule the
//! uploaded code cannot become.

use forge_capsule::{CapsuleError, CapsuleErrorKind};
use http::StatusCode;

use super::{Answer, Answers};

/// A hostile or oversize archive is the client's (400 / 413, its own code, field
/// `code`); a packing failure is ours.
impl Answers for CapsuleError {
    fn answer(&self) -> Answer {
        let status = match self.kind() {
            CapsuleErrorKind::Internal => return Answer::internal(),
            CapsuleErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            CapsuleErrorKind::Rejected => StatusCode::BAD_REQUEST,
        };
        Answer::new(status, self.code(), self.to_string()).field("code")
    }
}
