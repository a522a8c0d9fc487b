//! [`Migration`]: one numbered step of a backend's schema. Each backend keeps its own
//! list (`sqlite/migrations.rs`, `postgres/migrations.rs`) in its own SQL dialect, but
//! **version *n* means the same change in both**, with the same name (a test holds the
//! lists against each other). Released migrations are never edited.
//!
//! Adding a migration: append `Migration { version: <last + 1>, name, sql }` to *both*
//! lists (same version, same name, each backend's SQL). Two branches that each added
//! one renumber the later one when they meet; the lists must stay 1, 2, 3, … in order.

/// One schema step.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Its number: the schema version it brings the database to.
    pub version: u32,
    /// What it does, in a few words (the same in every backend).
    pub name: &'static str,
    /// The statements (one script, run in one transaction).
    pub sql: &'static str,
}

/// Whether `list` is numbered 1, 2, 3, … in order (checked by tests and at open).
pub fn contiguous(list: &[Migration]) -> bool {
    list.iter()
        .enumerate()
        .all(|(i, m)| usize::try_from(m.version).is_ok_and(|v| v == i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_number_and_name_their_migrations_alike() {
        let sqlite = super::super::sqlite::migrations::MIGRATIONS;
        let postgres = super::super::postgres::migrations::MIGRATIONS;
        assert!(contiguous(sqlite), "sqlite migrations are not 1..n");
        assert!(contiguous(postgres), "postgres migrations are not 1..n");
        let names = |l: &[Migration]| l.iter().map(|m| (m.version, m.name)).collect::<Vec<_>>();
        assert_eq!(names(sqlite), names(postgres));
    }
}
